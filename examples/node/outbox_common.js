// Helpers shared by the Node.js emit examples (docs/emit-contract.md): event ids, occurred_at
// and the report the tests read. Node.js standard library only.
'use strict';
const crypto = require('crypto');

// A time-ordered UUID (version 7) as outpost makes them, as 16 bytes; any UUID is accepted, but
// ids in time order keep the PostgreSQL id index compact.
function uuid7() {
  const b = crypto.randomBytes(16);
  const ms = BigInt(Date.now());
  for (let i = 0; i < 6; i++) b[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  b[6] = (b[6] & 0x0f) | 0x70; // version 7
  b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
  return b;
}

// Canonical lowercase text: 8-4-4-4-12.
function uuidText(bytes) {
  const h = bytes.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// occurred_at: Unix time in microseconds (a BigInt: beyond 2^53 in a few centuries, exact now).
function nowUs() {
  return BigInt(Date.now()) * 1000n;
}

// The events every example writes in its first transaction.
const EVENTS = [
  ['order.placed', 'order-42', '{"order":"order-42","total":1999}',
    { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }],
  ['order.paid', 'order-42', '{"order":"order-42"}', { source: 'caf\u00e9' }],
  ['customer.updated', 'customer-7', '{"customer":"customer-7"}', {}],
  ['audit.logged', '', '{"what":"unkeyed"}', {}],
];

// One JSON line per emitted event on stdout (tests/examples/run_example.py compares them with
// what `outpost relay` delivered).
function report(id, [type, key, payload, headers], committed = true) {
  process.stdout.write(JSON.stringify({
    id, type, key, payload: JSON.parse(payload), headers, committed,
  }) + '\n');
}

module.exports = { uuid7, uuidText, nowUs, EVENTS, report };
