;; version: 1
;; approval: ask for approval (a command), wait for the "approve" signal, then fulfil the
;; order with the signal's payload. The signal may arrive before or after the wait: the
;; inbox keeps it until the decision that consumes it.
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (import "durable" "wait_signal" (func $wait_signal (param i32 i32 i32) (result i32)))
  (import "durable" "complete" (func $complete (param i32 i32)))
  (import "durable" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "request_approval")
  (data (i32.const 32) "approve")
  (data (i32.const 48) "fulfil")
  (global $buf i32 (i32.const 1024))

  (func $load (result i32)
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (local.get $n))

  (func $check (param $status i32)
    (if (local.get $status) (then (call $fail (global.get $buf) (call $load)))))

  (func (export "run")
    (local $n i32)
    (local.set $n (call $load))
    (call $check (call $perform (i32.const 1) (i32.const 0) (i32.const 16) (global.get $buf) (local.get $n)))
    (call $check (call $wait_signal (i32.const 2) (i32.const 32) (i32.const 7)))
    (local.set $n (call $load))
    (call $check (call $perform (i32.const 3) (i32.const 48) (i32.const 6) (global.get $buf) (local.get $n)))
    (call $complete (global.get $buf) (call $load))))
