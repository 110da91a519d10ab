// SPDX-License-Identifier: Apache-2.0 OR MIT
// Test regions: files laid out from the generated ABI (@morpheus/abi), written and read with pwrite
// and pread. A MAP_SHARED mapping of the file shares its page cache, so the SDK sees these writes the
// way it sees a scheduler's. Only the test plays the scheduler here; the SDK is never bypassed.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const abi = require('@morpheus/abi');

const { RegionHeader: H, Scb } = abi;

function writeField(fd, offset, field, value) {
  const buf = Buffer.alloc(field.size);
  if (field.type === 'u64') buf.writeBigUInt64LE(BigInt(value));
  else if (field.type === 'u32') buf.writeUInt32LE(Number(value));
  else if (field.type === 'i32') buf.writeInt32LE(Number(value));
  else if (field.type === 'u16') buf.writeUInt16LE(Number(value));
  else throw new Error(`test region: cannot write a ${field.type}`);
  fs.writeSync(fd, buf, 0, buf.length, offset + field.offset);
}

function readField(fd, offset, field) {
  const buf = Buffer.alloc(field.size);
  fs.readSync(fd, buf, 0, buf.length, offset + field.offset);
  if (field.type === 'u64') return buf.readBigUInt64LE();
  if (field.type === 'u32') return buf.readUInt32LE();
  if (field.type === 'i32') return buf.readInt32LE();
  if (field.type === 'u16') return buf.readUInt16LE();
  throw new Error(`test region: cannot read a ${field.type}`);
}

/** A valid region file with `scbCount` zeroed SCBs in a fresh temporary directory. */
class TestRegion {
  constructor({ scbCount = 4, generation = 1n } = {}) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-'));
    this.path = path.join(this.dir, 'region');
    fs.writeFileSync(this.path, Buffer.alloc(H.size + scbCount * Scb.size));
    this.fd = fs.openSync(this.path, 'r+');
    const header = {
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
      backend: abi.Backend.SIM,
    };
    for (const [name, value] of Object.entries(header)) this.header(name, value);
    this.header('generation', generation); // last, as a scheduler publishes it
  }

  header(name, value) {
    const field = H.fields[name];
    if (value === undefined) return readField(this.fd, 0, field);
    writeField(this.fd, 0, field, value);
    return value;
  }

  scb(slot, name, value) {
    const field = Scb.fields[name];
    const base = H.size + slot * Scb.size;
    if (value === undefined) return readField(this.fd, base, field);
    writeField(this.fd, base, field, value);
    return value;
  }

  bump(slot, n = 1n) {
    return this.scb(slot, 'preempt_seq', this.scb(slot, 'preempt_seq') + BigInt(n));
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
