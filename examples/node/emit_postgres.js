#!/usr/bin/env node
// Emit outpost events from Node.js with pg (node-postgres), in the same transaction as the
// business write (docs/emit-contract.md, "PostgreSQL").
//
//   node emit_postgres.js postgresql://app@db/shop [--schema public] [--table outbox]
//   outpost relay --store 'postgresql://relay@db/shop?schema=public&table=outbox' --sink ...
//
// The outbox must exist: `outpost schema --store URL | psql ...`, or any outpost command that
// opened it once.
'use strict';
const { Client } = require('pg');
const { uuid7, uuidText, EVENTS, report } = require('./outbox_common');

const SUPPORTED_SCHEMA_VERSIONS = [4, 5, 6, 7, 8]; // docs/emit-contract.md, "Versions"

function options(argv) {
  const o = { dsn: argv[0], schema: 'public', table: 'outbox' };
  for (let i = 1; i + 1 < argv.length; i += 2) o[argv[i].replace(/^--/, '')] = argv[i + 1];
  if (!o.dsn) throw new Error('usage: emit_postgres.js DSN [--schema S] [--table T]');
  return o;
}

// Writes one event; call it inside the caller's transaction. occurred_at, and every column not
// named here, keep their defaults (the partition column `part` is computed).
async function emit(client, outbox, [type, key, payload, headers]) {
  const id = uuidText(uuid7());
  await client.query(
    `INSERT INTO ${outbox} (id, type, key, payload, headers) ` +
    'VALUES ($1::uuid, $2, $3, $4::bytea, $5::jsonb)',
    [id, type, key, Buffer.from(payload), JSON.stringify(headers)]);
  return id;
}

async function main() {
  const o = options(process.argv.slice(2));
  const client = new Client({ connectionString: o.dsn });
  await client.connect();
  const q = (name) => client.escapeIdentifier(name);
  const outbox = `${q(o.schema)}.${q(o.table)}`;
  const orders = `${q(o.schema)}.${q(o.table + '_orders')}`;
  const v = await client.query(
    `SELECT version FROM ${q(o.schema)}.outpost_schema_version WHERE tbl = $1`, [o.table]);
  if (!v.rows.length || !SUPPORTED_SCHEMA_VERSIONS.includes(v.rows[0].version)) {
    throw new Error(`outbox ${outbox} has schema version ${v.rows[0] && v.rows[0].version}: ` +
                    `this code writes version ${SUPPORTED_SCHEMA_VERSIONS}`);
  }
  await client.query(`CREATE TABLE IF NOT EXISTS ${orders} (id text PRIMARY KEY, total int)`);

  // One transaction: the order row and its events commit together. The relay is woken at COMMIT.
  await client.query('BEGIN');
  await client.query(`INSERT INTO ${orders} (id, total) VALUES ('order-42', 1999)`);
  const ids = [];
  for (const e of EVENTS) ids.push(await emit(client, outbox, e));
  await client.query('COMMIT');
  ids.forEach((id, i) => report(id, EVENTS[i]));

  // A transaction that rolls back takes its event with it.
  const gone = ['order.placed', 'order-43', '{"order":"order-43"}', {}];
  await client.query('BEGIN');
  await client.query(`INSERT INTO ${orders} (id, total) VALUES ('order-43', 5)`);
  report(await emit(client, outbox, gone), gone, false);
  await client.query('ROLLBACK');

  // A later transaction: delivered after the events of the same key above.
  const later = ['order.shipped', 'order-42', '{"order":"order-42"}', {}];
  await client.query('BEGIN');
  await client.query(`UPDATE ${orders} SET total = 0 WHERE id = 'order-42'`);
  const id = await emit(client, outbox, later);
  await client.query('COMMIT');
  report(id, later);
  await client.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
