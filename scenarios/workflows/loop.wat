;; version: 1
;; loop: 150 commands in a row, each fed the previous result ({"n": k} -> {"n": k+1}):
;; 300 history events and 151 decisions, every one replaying the whole history.
;; Operation ids are 100 + the iteration, stable across replays. Each result is piped
;; to the next command with in_len = -1 (the current value), without copying it out.
(module
  (import "durable" "value_len" (func $value_len (result i32)))
  (import "durable" "value_read" (func $value_read (param i32)))
  (import "durable" "perform" (func $perform (param i32 i32 i32 i32 i32) (result i32)))
  (import "durable" "complete" (func $complete (param i32 i32)))
  (import "durable" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "increment")
  (global $buf i32 (i32.const 1024))
  (global $count i32 (i32.const 150))

  (func $load (result i32)
    (local $n i32)
    (local.set $n (call $value_len))
    (call $value_read (global.get $buf))
    (local.get $n))

  (func (export "run")
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (global.get $count)))
        (if (call $perform (i32.add (i32.const 100) (local.get $i)) (i32.const 0) (i32.const 9)
              (i32.const 0) (i32.const -1))
          (then (call $fail (global.get $buf) (call $load))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (call $complete (global.get $buf) (call $load))))
