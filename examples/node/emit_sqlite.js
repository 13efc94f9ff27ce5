#!/usr/bin/env node
// Emit outpost events from Node.js with better-sqlite3, in the same transaction as the business
// write (docs/emit-contract.md, "SQLite").
//
//   node emit_sqlite.js app.db [--table outbox]
//   outpost relay --store 'sqlite:app.db?table=outbox' --sink ...
//
// The outbox must exist: `outpost schema --store sqlite:app.db | sqlite3 app.db`, or any
// outpost command that opened the file once.
'use strict';
const Database = require('better-sqlite3');
const { uuid7, uuidText, nowUs, EVENTS, report } = require('./outbox_common');

const SUPPORTED_SCHEMA_VERSIONS = [3, 4]; // docs/emit-contract.md, "Versions"

function main() {
  const [path, flag, tableArg] = process.argv.slice(2);
  const t = flag === '--table' ? tableArg : 'outbox';
  if (!path || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(t)) {
    throw new Error('usage: emit_sqlite.js DATABASE [--table NAME]');
  }
  const db = new Database(path);
  db.pragma('busy_timeout = 30000'); // wait for the relay's write lock instead of failing
  db.pragma('journal_mode = WAL');
  const version = db.prepare(`SELECT max(version) AS v FROM ${t}_schema`).get().v;
  if (!SUPPORTED_SCHEMA_VERSIONS.includes(version)) {
    throw new Error(`outbox '${t}' has schema version ${version}: this code writes ` +
                    `version ${SUPPORTED_SCHEMA_VERSIONS}`);
  }
  db.exec(`CREATE TABLE IF NOT EXISTS ${t}_orders (id TEXT PRIMARY KEY, total INTEGER)`);

  const insertState = db.prepare(`INSERT INTO ${t} (key) VALUES (?)`);
  const insertBody = db.prepare(
    `INSERT INTO ${t}_body (seq, id, type, payload, occurred_at, headers) VALUES (?, ?, ?, ?, ?, ?)`);
  // Writes one event; call it inside the caller's transaction. The state row first: its seq
  // (the event's place in the order per key) numbers the body.
  function emit([type, key, payload, headers]) {
    const id = uuid7();
    const { lastInsertRowid } = insertState.run(key);
    insertBody.run(lastInsertRowid, id, type, Buffer.from(payload), nowUs(),
                   Object.keys(headers).length ? JSON.stringify(headers) : null);
    return uuidText(id);
  }

  // One transaction (.immediate: BEGIN IMMEDIATE): the order row and its events commit together.
  const placeOrder = db.transaction(() => {
    db.prepare(`INSERT INTO ${t}_orders (id, total) VALUES ('order-42', 1999)`).run();
    return EVENTS.map(emit);
  });
  placeOrder.immediate().forEach((id, i) => report(id, EVENTS[i]));

  // A transaction that throws rolls back, taking its event with it.
  const gone = ['order.placed', 'order-43', '{"order":"order-43"}', {}];
  try {
    db.transaction(() => {
      db.prepare(`INSERT INTO ${t}_orders (id, total) VALUES ('order-43', 5)`).run();
      report(emit(gone), gone, false);
      throw new Error('rolled back');
    }).immediate();
  } catch (e) {
    if (e.message !== 'rolled back') throw e;
  }

  // A later transaction: delivered after the events of the same key above.
  const later = ['order.shipped', 'order-42', '{"order":"order-42"}', {}];
  const id = db.transaction(() => {
    db.prepare(`UPDATE ${t}_orders SET total = 0 WHERE id = 'order-42'`).run();
    return emit(later);
  }).immediate();
  report(id, later);
  db.close();
}

main();
