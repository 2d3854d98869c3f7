;; version: 1
;; runaway: one real command, then a loop that never ends. Fuel bounds every execution,
;; so this run fails cleanly (error kind "fuel_exhausted") and no other run is touched.
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "reserve")
  (global $buf i32 (i32.const 1024))
  (func (export "run")
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (drop (call $perform (i32.const 1) (i32.const 0) (i32.const 7) (global.get $buf) (local.get $n)))
    (loop $forever (br $forever))))
