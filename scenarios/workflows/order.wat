;; version: 1
;; order: perform three commands in sequence (reserve -> charge -> ship), each fed the
;; previous result; the run completes with the last result, or fails with the error of
;; the first command that failed for good.
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (import "durable" "complete" (func $complete (param i32 i32)))
  (import "durable" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "reserve")
  (data (i32.const 16) "charge")
  (data (i32.const 32) "ship")
  (global $buf i32 (i32.const 1024))

  ;; Copy the current value to $buf; return its length.
  (func $load (result i32)
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (local.get $n))

  ;; Perform command (name at $name, $len bytes) on the current value; fail the run on error.
  (func $step (param $op i32) (param $name i32) (param $len i32)
    (local $n i32)
    (local.set $n (call $load))
    (if (call $perform (local.get $op) (local.get $name) (local.get $len) (global.get $buf) (local.get $n))
      (then (call $fail (global.get $buf) (call $load)))))

  (func (export "run")
    (call $step (i32.const 1) (i32.const 0) (i32.const 7))
    (call $step (i32.const 2) (i32.const 16) (i32.const 6))
    (call $step (i32.const 3) (i32.const 32) (i32.const 4))
    (call $complete (global.get $buf) (call $load))))
