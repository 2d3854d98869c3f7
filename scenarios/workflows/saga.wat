;; version: 1
;; saga: book a flight, book a hotel, charge the card. When a step fails for good, the
;; steps already done are compensated in reverse order (cancel_hotel, cancel_flight) and
;; the run fails with the error of the step that failed.
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (import "durable" "complete" (func $complete (param i32 i32)))
  (import "durable" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "book_flight")
  (data (i32.const 16) "book_hotel")
  (data (i32.const 32) "charge_card")
  (data (i32.const 48) "cancel_hotel")
  (data (i32.const 64) "cancel_flight")
  (global $input i32 (i32.const 1024))
  (global $err i32 (i32.const 16384))
  (global $buf i32 (i32.const 32768))
  (global $input_len (mut i32) (i32.const 0))
  (global $err_len (mut i32) (i32.const 0))

  (func $load (result i32)
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (local.get $n))

  ;; Perform a step on the run's input; return its status.
  (func $do (param $op i32) (param $name i32) (param $len i32) (result i32)
    (call $perform (local.get $op) (local.get $name) (local.get $len)
      (global.get $input) (global.get $input_len)))

  ;; Keep the current value (the failed step's error) to fail with after compensating.
  (func $keep_error
    (global.set $err_len (call $value_len))
    (call $value_read (global.get $err)))

  (func (export "run")
    (global.set $input_len (call $value_len))
    (call $value_read (global.get $input))
    (if (call $do (i32.const 1) (i32.const 0) (i32.const 11))
      (then (call $fail (global.get $buf) (call $load))))
    (if (call $do (i32.const 2) (i32.const 16) (i32.const 10))
      (then
        (call $keep_error)
        (drop (call $do (i32.const 12) (i32.const 64) (i32.const 13)))
        (call $fail (global.get $err) (global.get $err_len))))
    (if (call $do (i32.const 3) (i32.const 32) (i32.const 11))
      (then
        (call $keep_error)
        (drop (call $do (i32.const 11) (i32.const 48) (i32.const 12)))
        (drop (call $do (i32.const 12) (i32.const 64) (i32.const 13)))
        (call $fail (global.get $err) (global.get $err_len))))
    (call $complete (global.get $buf) (call $load))))
