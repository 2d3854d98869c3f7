;; version: 1
;; sleep: three durable timers (2 ms, 5 ms, 0 ms by the store clock), then one command fed
;; the run's input, kept in memory across the sleeps (replay rebuilds it every time).
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (import "durable" "sleep" (func $sleep (param i32 i64) (result i32)))
  (import "durable" "complete" (func $complete (param i32 i32)))
  (import "durable" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "wake_up")
  (global $saved i32 (i32.const 1024))
  (global $buf i32 (i32.const 32768))

  (func $load (result i32)
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (local.get $n))

  (func $check (param $status i32)
    (if (local.get $status) (then (call $fail (global.get $buf) (call $load)))))

  (func (export "run")
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $saved))
    (call $check (call $sleep (i32.const 1) (i64.const 2)))
    (call $check (call $sleep (i32.const 2) (i64.const 5)))
    (call $check (call $sleep (i32.const 3) (i64.const 0)))
    (call $check (call $perform (i32.const 4) (i32.const 0) (i32.const 7) (global.get $saved) (local.get $n)))
    (call $complete (global.get $buf) (call $load))))
