'use strict';
// Wire values (docs/wire-protocol.md "Values") and the contract's argument limits.
// Every refusal is a ContractError naming the argument and the fix.

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const LIMITS = { tenant: 64, runId: 128, worker: 128, key: 255, name: 200, reason: 10000, jsonDepth: 512 };
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const DT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})(Z?)$/;

class ContractError extends Error {
  constructor(type, message, extra) {
    super(message);
    this.type = type;
    this.extra = extra || {};
  }
}
const invalid = (m) => new ContractError('InvalidArgument', m);
const invalidDecision = (m) => new ContractError('InvalidDecision', m);

function codePoints(s) {
  let n = 0;
  for (const _ of s) n += 1; // eslint-disable-line no-unused-vars
  return n;
}

function checkPortable(label, s, err = invalid) {
  if (s.includes('\u0000')) throw err(`${label} contains U+0000, which PostgreSQL cannot store: remove it`);
  if (LONE_SURROGATE.test(s)) throw err(`${label} contains a lone surrogate and is not valid UTF-8: encode it properly`);
}

function checkText(label, value, max, err = invalid) {
  if (typeof value !== 'string') throw err(`${label} must be a str, got ${typeName(value)}`);
  if (value.length === 0) throw err(`${label} must not be empty`);
  const n = codePoints(value);
  if (n > max) throw err(`${label} is ${n} characters long; the contract allows at most ${max}`);
  checkPortable(label, value, err);
  return value;
}

function typeName(v) {
  if (v === null) return 'None';
  if (Array.isArray(v)) return 'list';
  if (typeof v === 'object') return Object.keys(v).length === 1 ? Object.keys(v)[0] : 'object';
  return typeof v;
}

// ---- integers ---------------------------------------------------------------
function isInt(v) {
  return (typeof v === 'number' && Number.isInteger(v)) ||
    (v !== null && typeof v === 'object' && Object.keys(v).length === 1 && typeof v.$int === 'string' && /^-?\d+$/.test(v.$int));
}
function toBig(v) { return typeof v === 'number' ? BigInt(v) : BigInt(v.$int); }
function intOut(big) {
  const b = BigInt(big);
  return (b > MAX_SAFE || b < -MAX_SAFE) ? { $int: b.toString() } : Number(b);
}
function checkLimit(v, label = 'limit') {
  if (!isInt(v) || toBig(v) < 1n) throw invalid(`${label} must be a positive int, got ${JSON.stringify(v)}`);
  return Number(toBig(v) > 1000000000n ? 1000000000n : toBig(v));
}

// ---- time -------------------------------------------------------------------
function parseDt(v, label, err = invalid) {
  if (v === null || typeof v !== 'object' || typeof v.$dt !== 'string') throw err(`${label} must be a datetime ({"$dt": ...}), got ${typeName(v)}`);
  const m = DT.exec(v.$dt);
  if (!m) throw err(`${label}: ${JSON.stringify(v.$dt)} is not spelled YYYY-MM-DDTHH:MM:SS.ffffffZ`);
  if (!m[8]) throw err(`naive datetime ${v.$dt} is ambiguous: pass an aware datetime (e.g. datetime(..., tzinfo=timezone.utc))`);
  const ms = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
  if (m[1] < '0100') {
    const d = new Date(0);
    d.setUTCFullYear(+m[1], +m[2] - 1, +m[3]);
    d.setUTCHours(+m[4], +m[5], +m[6], 0);
    return BigInt(d.getTime()) * 1000n + BigInt(m[7]);
  }
  return BigInt(ms) * 1000n + BigInt(m[7]);
}
function dtOut(us) {
  if (us === null || us === undefined) return null;
  const b = BigInt(us);
  let ms = b / 1000n;
  let rest = b % 1000000n;
  if (rest < 0n) rest += 1000000n;
  if (b < 0n && b % 1000n !== 0n) ms -= 1n;
  const d = new Date(Number(ms));
  const iso = d.toISOString(); // YYYY-MM-DDTHH:MM:SS.mmmZ (years 0000-9999)
  return { $dt: `${iso.slice(0, 19)}.${rest.toString().padStart(6, '0')}Z` };
}
function parseDuration(v, label, err = invalid) {
  if (v === null || typeof v !== 'object' || !('$us' in v) || !isInt(v.$us)) {
    throw err(`${label} must be a timedelta, got ${typeName(v)}`);
  }
  return toBig(v.$us);
}
function checkLease(v) {
  const us = parseDuration(v, 'lease');
  if (us <= 0n) throw invalid(`lease must be positive, got ${us} microseconds`);
  return us;
}
function checkNonNegative(label, v, err = invalid) {
  const us = parseDuration(v, label, err);
  if (us < 0n) throw err(`${label} must not be negative, got ${us} microseconds`);
  return us;
}

// ---- JSON payloads ----------------------------------------------------------
// Wire payload -> JSON text for a jsonb column (refusing what JSON cannot hold).
function payloadText(label, value, err = invalid) {
  const out = [];
  const walk = (where, v, depth = 0) => {
    if (v === null || typeof v === 'boolean') { out.push(String(v)); return; }
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw err(`${where} is not finite; JSON has no NaN or infinity`);
      out.push(JSON.stringify(v));
      return;
    }
    if (typeof v === 'string') { checkPortable(where, v, err); out.push(JSON.stringify(v)); return; }
    if (Array.isArray(v)) {
      if (depth >= LIMITS.jsonDepth) throw err(`${label} nests arrays and objects deeper than ${LIMITS.jsonDepth} levels, the contract's limit`);
      out.push('[');
      v.forEach((x, i) => { if (i) out.push(','); walk(`${where}[${i}]`, x, depth + 1); });
      out.push(']');
      return;
    }
    if (typeof v === 'object') {
      const keys = Object.keys(v);
      if (keys.length === 1 && keys[0] === '$int') {
        if (!isInt(v)) throw err(`${where}: $int must hold decimal digits`);
        out.push(BigInt(v.$int).toString());
        return;
      }
      if (keys.length === 1 && keys[0] === '$float') {
        // An integral float: stored with a fraction so jsonb (numeric) and payloadOut keep it a float;
        // large ones written out in full (jsonb would print 1e+300 back as a 301-digit integer).
        const text = v.$float;
        if (typeof text !== 'string' || !/^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(text)) throw err(`${where} is ${text}; JSON has no NaN or infinity`);
        const n = Number(text);
        if (!Number.isFinite(n)) throw err(`${where} is ${text}; JSON has no NaN or infinity`);
        out.push(Number.isInteger(n) ? `${Object.is(n, -0) ? '-' : ''}${BigInt(n).toString()}.0` : JSON.stringify(n));
        return;
      }
      let obj = v;
      if (keys.length === 1 && keys[0] === '$obj') obj = v.$obj;
      else if (keys.some((k) => k.startsWith('$'))) throw err(`${where} has a $ key outside $obj (see the wire spec)`);
      if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw err(`${where}: $obj must hold an object`);
      if (depth >= LIMITS.jsonDepth) throw err(`${label} nests arrays and objects deeper than ${LIMITS.jsonDepth} levels, the contract's limit`);
      out.push('{');
      Object.keys(obj).forEach((k, i) => {
        checkPortable(`${where} key`, k, err);
        if (i) out.push(',');
        out.push(JSON.stringify(k), ':');
        walk(`${where}[${JSON.stringify(k)}]`, obj[k], depth + 1);
      });
      out.push('}');
      return;
    }
    throw err(`${where} is not a JSON value`);
  };
  walk(label, value === undefined ? null : value);
  return out.join('');
}

// JSON text (from jsonb) -> wire payload, exact: big integers become $int, $ keys wrap in $obj.
function payloadOut(text) {
  if (text === null || text === undefined) return null;
  let i = 0;
  const s = text;
  const ws = () => { while (i < s.length && ' \t\n\r'.includes(s[i])) i += 1; };
  const value = () => {
    ws();
    const c = s[i];
    if (c === '{') {
      i += 1; const obj = {}; let dollar = false; ws();
      if (s[i] === '}') { i += 1; return obj; }
      for (;;) {
        ws(); const k = str(); ws(); i += 1; // ':'
        obj[k] = value(); if (k.startsWith('$')) dollar = true; ws();
        if (s[i] === ',') { i += 1; continue; }
        i += 1; break; // '}'
      }
      return dollar ? { $obj: obj } : obj;
    }
    if (c === '[') {
      i += 1; const arr = []; ws();
      if (s[i] === ']') { i += 1; return arr; }
      for (;;) { arr.push(value()); ws(); if (s[i] === ',') { i += 1; continue; } i += 1; break; }
      return arr;
    }
    if (c === '"') return str();
    if (s.startsWith('true', i)) { i += 4; return true; }
    if (s.startsWith('false', i)) { i += 5; return false; }
    if (s.startsWith('null', i)) { i += 4; return null; }
    const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(s.slice(i, i + 4000));
    if (!m) throw new ContractError('StorageError', `stored JSON is malformed at ${i}`);
    i += m[0].length;
    if (!m[1] && !m[2]) return intOut(BigInt(m[0]));
    const n = Number(m[0]);
    return Number.isInteger(n) ? { $float: m[0] } : n; // a float with a whole value: tagged, or it reads as an int
  };
  const str = () => {
    const start = i; i += 1;
    while (s[i] !== '"') { if (s[i] === '\\') i += 1; i += 1; }
    i += 1;
    return JSON.parse(s.slice(start, i));
  };
  return value();
}

module.exports = {
  ContractError, LIMITS, invalid, invalidDecision, checkText, checkPortable, isInt, toBig, intOut,
  checkLimit, parseDt, dtOut, parseDuration, checkLease, checkNonNegative, payloadText, payloadOut, typeName,
};
