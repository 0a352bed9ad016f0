/**
 * The backup's JSON scanner (src/backup/json-scan.ts) against JSON.parse: the same texts accepted
 * and refused, fed whole, split at every byte and one byte at a time, on fixed edge cases and on
 * fast-check's JSON texts with bytes cut, added and replaced. Then the body verifiers built on it
 * (src/backup/verify.ts): documents counted only in the top-level `documents` array, `success` and
 * `meta.count` only at the top, NDJSON line by line, and a body cut anywhere never passing.
 */
import fc from 'fast-check';
import t from 'tap';
import { JsonScanner } from '../../src/backup/json-scan.js';
import { bodyVerifier, incompleteReason, type BackupFormat } from '../../src/backup/verify.js';

/** Whether the scanner accepts `bytes` fed in the given pieces. */
function scans(bytes: Buffer, cuts: number[] = []): boolean {
  const s = new JsonScanner({ value: () => false });
  try {
    let from = 0;
    for (const at of [...cuts, bytes.length]) {
      s.write(bytes.subarray(from, at));
      from = at;
    }
    s.end();
    return true;
  } catch {
    return false;
  }
}

function parses(bytes: Buffer): boolean {
  try {
    JSON.parse(bytes.toString('utf8'));
    return true;
  } catch {
    return false;
  }
}

const VALID = [
  '0',
  '-0',
  '-0.5e+10',
  '1E5',
  '12.25e-3',
  '"\\u00e9\\n\\"\\\\\\/\\b\\f\\r\\t"',
  '"\\ud800"',
  '"é ☃ 𝄞 \u2028"',
  '[]',
  '{}',
  ' [ {"a" : [ ] , "b":null} ,true,false, "x" ] \r\n\t',
  '{"success":true,"book":{"id":"b"},"documents":[{"id":"d","n":[1,2,{"k":[]}]}],"meta":{"count":1}}',
  '[[[[[[[[[[1]]]]]]]]]]',
];
const INVALID = [
  '',
  ' ',
  '01',
  '-',
  '1.',
  '.5',
  '1e',
  '1e+',
  '+1',
  '0x10',
  '"\x01"',
  '"\t"',
  '"\\u12G4"',
  '"\\a"',
  '"abc',
  '[1,]',
  '[,1]',
  '{"a":1,}',
  '{"a" 1}',
  '{1:2}',
  '{"a":}',
  '[1 2]',
  'tru',
  'nul',
  'truex',
  'True',
  '[]]',
  '{]',
  '[}',
  '{} {}',
  '[1]x',
  '\ufeff1',
  'NaN',
  '"a"b',
];

/** An ASCII-only label: TAP output must not carry raw U+2028 or control characters. */
const label = (s: string) =>
  JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

t.test('fixed texts: accepted exactly when JSON.parse accepts them, however they are split', async (t) => {
  for (const [text, ok] of [...VALID.map((v) => [v, true] as const), ...INVALID.map((v) => [v, false] as const)]) {
    const bytes = Buffer.from(text, 'utf8');
    t.equal(parses(bytes), ok, `${label(text)}: JSON.parse agrees with the case list`);
    t.equal(scans(bytes), ok, `${label(text)} whole`);
    let splits = true;
    for (let at = 0; at <= bytes.length; at++) splits &&= scans(bytes, [at]) === ok;
    t.ok(splits, `${label(text)} split at every byte`);
    t.equal(
      scans(
        bytes,
        Array.from({ length: bytes.length }, (_, i) => i),
      ),
      ok,
      `${label(text)} byte by byte`,
    );
  }
});

t.test('nesting deeper than 1024 is refused, not a crash', async (t) => {
  t.equal(scans(Buffer.from('['.repeat(1024) + ']'.repeat(1024))), true);
  t.equal(scans(Buffer.from('['.repeat(1025) + ']'.repeat(1025))), false);
});

const jsonText = fc.json({ maxDepth: 4 }).map((s) => Buffer.from(s, 'utf8'));
const cutsOf = (length: number) =>
  fc.uniqueArray(fc.integer({ min: 0, max: length }), { maxLength: 4 }).map((a) => a.sort((x, y) => x - y));

t.test('property: every JSON text is accepted, in any pieces', async (t) => {
  fc.assert(
    fc.property(
      jsonText.chain((b) => fc.tuple(fc.constant(b), cutsOf(b.length))),
      ([bytes, cuts]) => scans(bytes, cuts),
    ),
    { numRuns: 2000 },
  );
  t.pass('2000 runs');
});

t.test('property: with bytes cut, added or replaced, the scanner agrees with JSON.parse', async (t) => {
  const edit = fc.record({
    at: fc.nat(),
    kind: fc.constantFrom('cut', 'add', 'replace'),
    byte: fc.constantFrom(...Buffer.from(' \n{}[],:"\\-+.0123456789eEtrufalsn\x01\x7f')),
  });
  fc.assert(
    fc.property(jsonText, fc.array(edit, { minLength: 1, maxLength: 3 }), fc.nat(), (original, edits, cut) => {
      let bytes = original;
      for (const e of edits) {
        const at = bytes.length === 0 ? 0 : e.at % (bytes.length + 1);
        const byte = Buffer.from([e.byte]);
        if (e.kind === 'cut') bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + 1)]);
        else if (e.kind === 'add') bytes = Buffer.concat([bytes.subarray(0, at), byte, bytes.subarray(at)]);
        else bytes = Buffer.concat([bytes.subarray(0, at), byte, bytes.subarray(at + 1)]);
      }
      return scans(bytes, [cut % (bytes.length + 1)]) === parses(bytes);
    }),
    { numRuns: 5000 },
  );
  t.pass('5000 runs');
});

/** The verdict of a body fed in 7-byte pieces, or the error's message. */
function verdictOf(
  format: BackupFormat,
  body: string,
): ReturnType<ReturnType<typeof bodyVerifier>['verdict']> | string {
  const v = bodyVerifier(format);
  return new Promise<ReturnType<typeof v.verdict> | string>((resolve) => {
    v.on('error', (err) => resolve(err.message));
    v.on('finish', () => resolve(v.verdict()));
    const bytes = Buffer.from(body);
    for (let i = 0; i < bytes.length; i += 7) v.write(bytes.subarray(i, i + 7));
    v.end();
  }) as never;
}

// A document holding what the verdicts look for at the top: found there only, never in it.
const DOC = (id: string, meta = true) =>
  `{"id":"${id}","documents":[{"x":1}],${meta ? '"meta":{"count":7},' : ''}"success":false,"contentHtml":"<p>\\"}\\u005d\\n"}`;

t.test(
  'JSON verdicts: documents counted in the top-level array only; success and meta.count at the top only',
  async (t) => {
    const whole = `{"success":true,"book":{"id":"b","meta":{"count":9}},"documents":[${DOC('a')},${DOC('b')}],"meta":{"count":2}}`;
    t.same(await verdictOf('json', whole), { documents: 2, count: 2, success: true });
    t.equal(incompleteReason((await verdictOf('json', whole)) as never), null);
    t.same(await verdictOf('json', whole.replace('"success":true', '"success":false')), {
      documents: 2,
      count: 2,
      success: false,
    });
    t.same(await verdictOf('json', whole.replace('"meta":{"count":2}', '"meta":{}')), {
      documents: 2,
      count: null,
      success: true,
    });
    t.same(await verdictOf('json', `{"success":true,"documents":[],"meta":{"count":0}}`), {
      documents: 0,
      count: 0,
      success: true,
    });
    t.match(await verdictOf('json', whole.slice(0, -1)), /not valid JSON/, 'cut before its last byte');
    t.match(await verdictOf('json', `${whole}{}`), /more after the end/, 'a second value');
    let cutsPass = 0;
    for (let at = 0; at < whole.length; at++) {
      const v = await verdictOf('json', whole.slice(0, at));
      if (typeof v !== 'string' && incompleteReason(v) === null) cutsPass++;
    }
    t.equal(cutsPass, 0, 'no cut of the body passes');
  },
);

t.test('NDJSON verdicts: the book line first, a document per line, the meta line last', async (t) => {
  // A line with a top-level "meta" is the meta line (no document has one).
  const whole = `{"success":true,"book":{"id":"b"}}\n${DOC('a', false)}\n${DOC('b', false)}\r\n{"meta":{"count":2}}\n`;
  t.same(await verdictOf('ndjson', whole), { documents: 2, count: 2, success: true });
  t.same(await verdictOf('ndjson', whole.replace('"success":true', '"success":false')), {
    documents: 2,
    count: 2,
    success: false,
  });
  t.match(await verdictOf('ndjson', `${whole}${DOC('c', false)}\n`), /a line after the meta line/);
  t.match(await verdictOf('ndjson', whole.replace('\n', '\n\n')), /an empty line/);
  t.match(
    await verdictOf('ndjson', whole.replace(DOC('a', false), '{"id":\n"a"}')),
    /inside a value/,
    'a value across lines',
  );
  let cutsPass = 0;
  for (let at = 0; at < whole.length; at++) {
    const v = await verdictOf('ndjson', whole.slice(0, at));
    if (typeof v !== 'string' && incompleteReason(v) === null) cutsPass++;
  }
  t.equal(cutsPass, 0, 'no cut of the body passes');
});
