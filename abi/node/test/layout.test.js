// SPDX-License-Identifier: Apache-2.0 OR MIT
// The generated Node ABI module against spec/abi.toml, read afresh.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { parse } = require('smol-toml');
const abi = require('..');

// The magic numbers exceed 2^53: read every integer as a BigInt.
const spec = parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'spec', 'abi.toml'), 'utf8'), {
  integersAsBigInt: true,
});
const camel = (name) => name.split('_').map((p) => p[0].toUpperCase() + p.slice(1)).join('');
const big = (v) => (typeof v === 'bigint' ? v : BigInt(v));

test('version', () => {
  assert.equal(abi.ABI_MAJOR, Number(spec.abi.major));
  assert.equal(abi.ABI_MINOR, Number(spec.abi.minor));
});

for (const record of spec.record) {
  test(`record ${record.name} matches the spec`, () => {
    const layout = abi[camel(record.name)];
    assert.equal(layout.size, Number(record.size));
    assert.equal(layout.align, Number(record.align));
    assert.deepEqual(Object.keys(layout.fields), record.fields.map((f) => f.name));
    for (const f of record.fields) {
      const got = layout.fields[f.name];
      assert.equal(got.offset, Number(f.offset), `${record.name}.${f.name} offset`);
      assert.equal(got.size, Number(f.size), `${record.name}.${f.name} size`);
      assert.equal(got.type, f.type);
      assert.equal(got.atomic, f.access === 'atomic');
    }
  });
}

for (const e of spec.enum) {
  test(`enum ${e.name} matches the spec`, () => {
    const got = abi[camel(e.name)];
    assert.deepEqual(Object.keys(got), e.values.map((v) => v.name));
    for (const v of e.values) assert.equal(big(got[v.name]), big(v.value), `${e.name}.${v.name}`);
  });
}

test('constants and escapable defaults match the spec', () => {
  for (const c of spec.constant) {
    if (c.type === 'str') assert.equal(abi[c.name], c.value, c.name);
    else assert.equal(big(abi[c.name]), big(c.value), c.name);
  }
  assert.deepEqual({ ...abi.ESCAPABLE_DEFAULT }, { ...spec.escapable_default });
});

test('offsets address the right bytes of a shared buffer', () => {
  const buf = Buffer.alloc(abi.Scb.size);
  buf.writeBigUInt64LE(0x0102030405060708n, abi.Scb.fields.last_ack_seq.offset);
  assert.equal(buf[64], 8); // line 1 starts at byte 64, little-endian
  assert.ok(abi.Scb.fields.last_ack_seq.offset >= 64 && abi.Scb.fields.preempt_seq.offset < 64);
});
