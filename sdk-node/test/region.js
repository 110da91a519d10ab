// SPDX-License-Identifier: Apache-2.0 OR MIT
// Test regions: files laid out from the generated ABI (@morpheus/abi), written and read with pwrite
// and pread. A MAP_SHARED mapping of the file shares its page cache, so the SDK sees these writes the
// way it sees a scheduler's. Only the test plays the scheduler here; the SDK is never bypassed. The
// region and every yield request are published by the generated test writer (abi/node/test-region.js,
// from spec/abi.toml's [[publication]] order); a single field is stored with its storeField.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const abi = require('@morpheus/abi');
const publish = require('@morpheus/abi/test-region.js');

const { RegionHeader: H, Scb } = abi;

/** A valid region file with `scbCount` zeroed SCBs in a fresh temporary directory. */
class TestRegion {
  constructor({ scbCount = 4, generation = 1n } = {}) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-'));
    this.path = path.join(this.dir, 'region');
    fs.writeFileSync(this.path, Buffer.alloc(H.size + scbCount * Scb.size));
    this.fd = fs.openSync(this.path, 'r+');
    publish.publishRegion(this.fd, 0, {
      magic: abi.REGION_MAGIC,
      abi_major: abi.ABI_MAJOR,
      abi_minor: abi.ABI_MINOR,
      header_size: H.size,
      scb_stride: Scb.size,
      scb_count: scbCount,
      scheduler_mode: abi.SchedulerMode.OBSERVER,
      escalation_policy: abi.EscalationPolicy.NONE,
      slice_ns: abi.DEFAULT_SLICE_NS,
      grace_ns: abi.DEFAULT_GRACE_NS,
      hint_min_interval_ns: abi.DEFAULT_HINT_MIN_INTERVAL_NS,
      scheduler_pid: process.pid,
      backend: abi.Backend.SIM,
    }, generation);
  }

  header(name, value) {
    const field = H.fields[name];
    if (value === undefined) return publish.loadField(this.fd, 0, field);
    publish.storeField(this.fd, 0, field, value);
    return value;
  }

  scb(slot, name, value) {
    const field = Scb.fields[name];
    const base = H.size + slot * Scb.size;
    if (value === undefined) return publish.loadField(this.fd, base, field);
    publish.storeField(this.fd, base, field, value);
    return value;
  }

  /** `n` yield requests on `slot`, each the generated publication; returns the last preempt_seq. */
  bump(slot, n = 1n) {
    let seq;
    for (let i = 0n; i < BigInt(n); i++) seq = publish.publishRequest(this.fd, H.size + slot * Scb.size, process.hrtime.bigint());
    return seq;
  }

  /** Store back the named fields of SCB `slot` as they are in `before` (a bytes() copy): undoes the
   * test's own requests (preempt_seq, last_hint_ns) before a "nothing else changed" comparison. */
  rewind(slot, before, ...names) {
    const base = H.size + slot * Scb.size;
    for (const name of names) {
      const field = Scb.fields[name];
      publish.storeField(this.fd, base, field, before.readBigUInt64LE(base + field.offset));
    }
  }

  bytes() {
    return fs.readFileSync(this.path);
  }

  close() {
    fs.closeSync(this.fd);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A file of these bytes in a fresh temporary directory. */
function fileWith(bytes) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-'));
  const file = path.join(dir, 'region');
  fs.writeFileSync(file, bytes);
  return { path: file, close: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

module.exports = { TestRegion, fileWith, abi };
