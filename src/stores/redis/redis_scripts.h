#pragma once
// The Lua scripts of the Redis store, one file each under lua/ (read, lint and edit them as Lua),
// embedded at build time by embed_lua.cmake into redis_lua.h as kPrologue, kAppend, kClaimFn,
// ... (file name in CamelCase). A script sent to Redis is the prologue, the function files it
// needs, then its body (redis_store.cpp, Scripts). Every script gets KEYS[1] = a key of the outbox
// (so Redis Cluster routes it to the slot of `{prefix}`) and ARGV[1] = the key base "{prefix}:";
// the other keys are built from the base and all hash to the same slot.
//
// Keys (B = "{prefix}:"), layout 3. Its own names ("v3:") for everything an older layout also
// had, so a relay of an older build on the same prefix sees an empty outbox and can never
// consume (and deliver empty) an event of this one; shared with older layouts are only seq,
// lock, writer and wake (one writer at a time, whichever build it is).
//   B.."seq"           INCR sequence (emit order)
//   B.."v3:body"       hash id -> the event's body, packed by the client (redis_body.h): key,
//                      type, occurred_at, headers, payload. One hash, so an emit writes all of a
//                      call's bodies with one HSET and a claim reads a batch's with one HMGET:
//                      a per-event command inside a script costs more than the command's work
//   B.."v3:link"       hash id -> predecessor "<id> <seq>": the key's last undelivered event
//                      when this one was appended (no field = none)
//   B.."v3:error"      hash id -> last delivery error
//   B.."v3:dead_at"    hash id -> when it was dead-lettered (us)
//   B.."v3:own"        hash id -> "<attempts>" or "<attempts> <lease owner>" while leased (no
//                      field = 0 attempts): a claim writes and an ack reads the owners of a
//                      whole batch with one HSET / HMGET. The owner stays after the lease
//                      expires (ack, nack and release clear it): a claim that finds one counts
//                      a crash instead of an attempt (store.h)
//   B.."v3:crashes"    hash id -> crashes (no field = 0; no hash = no event has one, and a claim
//                      reads it only then). A hash of its own, not part of "own": an older build
//                      of layout 3 on the same prefix must still parse "own"
//   B.."v3:pending"    zset id -> due time (ms, server clock)
//   B.."v3:leased"     zset id -> lease expiry (ms)
//   B.."v3:died"       zset id -> when it was dead-lettered (ms): dead_retention trims by it
//   B.."v3:at"         zset id -> deliver_at (ms) of a scheduled event while live or dead (no
//                      entry = not scheduled; its pending score is the due time that holds it):
//                      list shows it, stats counts the ones still ahead as scheduled
//   B.."v3:live"       zset id -> seq of every undelivered event (list order, oldest; the seq a
//                      claim returns)
//   B.."v3:dead"       zset id -> seq
//   B.."v3:archive"    zset id -> ack time (ms); B.."v3:archived" hash id -> body (archiving on)
//   B.."v3:archived_at" hash id -> deliver_at (ms) of an archived scheduled event (no field =
//                      not scheduled; trimmed with the archive)
//   B.."v3:tail"       hash key -> "<id> <seq>" of the key's last appended undelivered (or
//                      dead: strict order holds the key behind it) event
//                      (ordered mode: each event links to its predecessor of the same key, and
//                      is claimable once that one is no longer live (acked, dead, discarded) or
//                      is taken by the same claim; links, unlike a zset per key, cost no command
//                      per event: the tail hash is read and written once per append and per ack)
//   B.."lock"          writer lease: the holder's token, PX = writer_lease_ms (renewed by a
//                      heartbeat, so a crashed holder's standby takes over after that, whatever
//                      the event lease)
//   B.."writer"        hash: owner (last holder's token), fence (incremented when the holder
//                      changes), moved_at (ms: when that holder took it)
//   B.."wake"          pub/sub channel published on emit and retry
// An older layout's events live in B.."live" / B.."dead" (no "v3:"): while either exists the
// scripts refuse (layout_error), so those events are neither misread nor left waiting unseen.

#include "redis_lua.h"  // generated from lua/*.lua
