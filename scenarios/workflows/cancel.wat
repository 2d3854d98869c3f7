;; version: 1
;; cancel: hold a seat, notify the customer, then wait an hour for the show. The customer
;; cancels (the notify_customer handler requests cancellation of this run), so either the
;; notification or the hour-long sleep returns CANCELLED (2); the workflow then releases
;; the seat (compensation) and ends the run cancelled with the release's result.
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (import "durable" "sleep" (func $sleep (param i32 i64) (result i32)))
  (import "durable" "complete" (func $complete (param i32 i32)))
  (import "durable" "fail" (func $fail (param i32 i32)))
  (import "durable" "cancel" (func $cancel (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hold_seat")
  (data (i32.const 16) "notify_customer")
  (data (i32.const 32) "release_seat")
  (global $seat i32 (i32.const 1024))
  (global $buf i32 (i32.const 32768))
  (global $seat_len (mut i32) (i32.const 0))

  (func $load (result i32)
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (local.get $n))

  (func (export "run")
    (local $n i32)
    (local $status i32)
    (local.set $n (call $load))
    (local.set $status
      (call $perform (i32.const 1) (i32.const 0) (i32.const 9) (global.get $buf) (local.get $n)))
    (if (i32.eq (local.get $status) (i32.const 1))
      (then (call $fail (global.get $buf) (call $load))))
    (if (i32.eq (local.get $status) (i32.const 2))
      (then (call $cancel (global.get $buf) (call $load))))
    ;; keep the seat: the compensation needs it
    (global.set $seat_len (call $value_len))
    (call $value_read (global.get $seat))
    (local.set $status
      (call $perform (i32.const 2) (i32.const 16) (i32.const 15) (global.get $seat) (global.get $seat_len)))
    (if (i32.eqz (local.get $status))
      (then (local.set $status (call $sleep (i32.const 3) (i64.const 3600000)))))
    (if (i32.eq (local.get $status) (i32.const 2))
      (then
        (drop (call $perform (i32.const 4) (i32.const 32) (i32.const 12) (global.get $seat) (global.get $seat_len)))
        (call $cancel (global.get $buf) (call $load))))
    (if (local.get $status)
      (then (call $fail (global.get $buf) (call $load))))
    (call $complete (global.get $seat) (global.get $seat_len))))
