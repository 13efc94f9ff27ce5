#!/usr/bin/env node
// Emit outpost events from Node.js with ioredis, in the same MULTI as the business write
// (docs/emit-contract.md, "Redis").
//
//   outpost schema --store 'redis://cache:6379/0?prefix=shop' > outpost_append.lua
//   node emit_redis.js redis://cache:6379/0 --prefix shop --script outpost_append.lua [--cluster]
//   outpost relay --store 'redis://cache:6379/0?prefix=shop' --sink ...
//
// With --cluster the URL is one node of a Redis Cluster: ioredis sends the MULTI to the node
// owning the outbox's hash tag {prefix}; the business keys carry that tag too.
'use strict';
const fs = require('fs');
const Redis = require('ioredis');
const { uuid7, uuidText, nowUs, EVENTS, report } = require('./outbox_common');

const SUPPORTED_LAYOUTS = ['3']; // docs/emit-contract.md, "Versions"

function options(argv) {
  const o = { url: argv[0], prefix: 'outpost', script: '', cluster: false };
  for (let i = 1; i < argv.length; i++) {
    if (argv[i] === '--cluster') o.cluster = true;
    else o[argv[i].replace(/^--/, '')] = argv[++i];
  }
  if (!o.url || !o.script) {
    throw new Error('usage: emit_redis.js URL --prefix P --script FILE [--cluster]');
  }
  return o;
}

// "<byte length>:<bytes>"
function field(data) {
  const b = Buffer.isBuffer(data) ? data : Buffer.from(String(data), 'utf8');
  return Buffer.concat([Buffer.from(`${b.length}:`), b]);
}

// The event body the append script stores: length-prefixed key, type, occurred_at (Unix
// microseconds) and headers, then the payload's bytes.
function packBody(key, type, occurredUs, headers, payload) {
  const h = Buffer.concat(Object.entries(headers).flatMap(([k, v]) => [field(k), field(v)]));
  return Buffer.concat([field(key), field(type), field(occurredUs.toString()), field(h),
                        Buffer.from(payload)]);
}

class Outbox {
  constructor(script, prefix) {
    // The script's first line names its layout ("... the Redis append script, layout 3, ...").
    const m = /layout (\w+),/.exec(script);
    if (!m || !SUPPORTED_LAYOUTS.includes(m[1])) {
      throw new Error(`the append script is for layout ${m && m[1]}: this code packs ` +
                      `layout ${SUPPORTED_LAYOUTS}`);
    }
    this.script = script;
    this.base = `{${prefix}}:`;
    this.args = [];
  }

  add([type, key, payload, headers]) {
    const id = uuidText(uuid7());
    this.args.push(id, key, packBody(key, type, nowUs(), headers, payload));
    return id;
  }

  // Queues one EVAL for every event added into the MULTI. EVAL, not EVALSHA: a NOSCRIPT error
  // would only show at EXEC, after the MULTI's other writes.
  queue(multi) {
    const n = this.args.length / 3;
    multi.eval(this.script, 1, `${this.base}pending`, this.base, n, ...this.args);
    this.args = [];
  }
}

async function main() {
  const o = options(process.argv.slice(2));
  const outbox = new Outbox(fs.readFileSync(o.script, 'utf8'), o.prefix);
  let r;
  if (o.cluster) {
    const u = new URL(o.url);
    r = new Redis.Cluster([{ host: u.hostname, port: Number(u.port) }]);
  } else {
    r = new Redis(o.url);
  }
  const orders = `{${o.prefix}}:orders`; // a business key in the outbox's slot (same hash tag)

  // One MULTI ... EXEC: the order and its events are written together.
  let multi = r.multi();
  multi.hset(orders, 'order-42', 1999);
  const ids = EVENTS.map((e) => outbox.add(e));
  outbox.queue(multi);
  const replies = await multi.exec();
  for (const [err] of replies) if (err) throw err; // OUTPOST_DUPLICATE, OUTPOST_LAYOUT
  if (replies[replies.length - 1][1] !== EVENTS.length) throw new Error(`append: ${replies}`);
  ids.forEach((id, i) => report(id, EVENTS[i]));

  // A MULTI that is never executed (ioredis queues it client-side) writes nothing.
  const gone = ['order.placed', 'order-43', '{"order":"order-43"}', {}];
  multi = r.multi();
  multi.hset(orders, 'order-43', 5);
  report(outbox.add(gone), gone, false);
  outbox.queue(multi);
  multi = null;

  // A later MULTI: delivered after the events of the same key above.
  const later = ['order.shipped', 'order-42', '{"order":"order-42"}', {}];
  multi = r.multi();
  multi.hset(orders, 'order-42', 0);
  const id = outbox.add(later);
  outbox.queue(multi);
  for (const [err] of await multi.exec()) if (err) throw err;
  report(id, later);
  r.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
