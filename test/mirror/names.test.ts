/** File names from slugs (src/mirror/names.ts): safe on Linux, macOS and Windows, unique among siblings whatever order they come in. */
import fc from 'fast-check';
import t from 'tap';
import { idTag, NAME_BYTES, safeBaseName, uniqueNames, type NameRequest } from '../../src/mirror/names.js';

t.test('names a slug safely', async (t) => {
  t.equal(safeBaseName('CON'), 'CON_', 'a Windows device name');
  t.equal(safeBaseName('nul.tar'), 'nul.tar_', 'with an extension too');
  t.equal(safeBaseName('com1'), 'com1_');
  t.equal(safeBaseName('a<b>c:d"e/f\\g|h?i*j'), 'a-b-c-d-e-f-g-h-i-j');
  t.equal(safeBaseName('tab\there'), 'tab-here', 'control characters');
  t.equal(safeBaseName('trailing. . '), 'trailing', 'no trailing dots or spaces');
  t.equal(safeBaseName('.hidden'), '_.hidden', 'no leading dot');
  t.equal(safeBaseName('...'), 'untitled');
  t.equal(safeBaseName(''), 'untitled');
  t.equal(safeBaseName('e\u0301t\u00e9'), '\u00e9t\u00e9', 'NFC, as macOS gives names back');
  t.equal(safeBaseName('Index', new Set(['index'])), 'Index_', 'a reserved name, ignoring case');
  const long = safeBaseName('é'.repeat(200));
  t.ok(Buffer.byteLength(long) <= NAME_BYTES && long === 'é'.repeat(NAME_BYTES / 2), 'cut at a code point');
});

t.test('siblings get unique names by a rule that ignores arrival order', async (t) => {
  const req = (id: string, base: string, createdAt = '2024', ext = '.md'): NameRequest => ({
    id,
    createdAt,
    base,
    ext,
  });
  const names = uniqueNames([req('b', 'Notes', '2024-02'), req('a', 'notes', '2024-03'), req('c', 'notes', '2024-02')]);
  t.equal(names.get('b'), 'Notes.md', 'the earliest created keeps the name');
  t.equal(names.get('a'), `notes-${idTag('a')}.md`);
  t.equal(names.get('c'), `notes-${idTag('c')}.md`, 'a later one is suffixed too');
  t.same(uniqueNames([req('x', 'a', '1', '')], new Set(['a'])).get('x'), `a-${idTag('x')}`, 'a name the folder keeps');
  fc.assert(
    fc.property(
      fc.array(
        fc.record({
          id: fc.string({ minLength: 1 }),
          base: fc.constantFrom('a', 'A', 'b', `a-${idTag('q')}`),
          createdAt: fc.constantFrom('1', '2'),
        }),
        { maxLength: 12 },
      ),
      (raw) => {
        const list = [...new Map(raw.map((r) => [r.id, { ...r, ext: '.md' }])).values()];
        const one = uniqueNames(list);
        const other = uniqueNames([...list].reverse());
        const lower = [...one.values()].map((n) => n.toLowerCase());
        return new Set(lower).size === list.length && [...one].every(([id, n]) => other.get(id) === n);
      },
    ),
  );
});
