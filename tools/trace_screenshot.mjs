// trace_screenshot.mjs - a picture of a --trace-html page, for the documents
// (tools/doc_screenshots.sh runs it; it is not meant to be run alone).
//
//   node tools/trace_screenshot.mjs --playwright DIR/node_modules/playwright-core/index.mjs \
//       --chromium /usr/bin/chromium --page P.html --keys p --out notes/img/x.png --stamp TEXT
//
// Opens the page in headless chromium at 1280 pixels wide, presses the keys
// (comma-separated, as playwright names them), and writes the whole page as
// a PNG with TEXT in a tEXt chunk named "trace-page" right after its header:
// doc_screenshots.sh --check finds the page's hash there without a browser.
import fs from 'node:fs';
import path from 'node:path';

const arg = (name, dflt) => {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const { chromium } = await import(path.resolve(arg('playwright')));

// CRC-32 as PNG computes it (ISO 3309), over a chunk's type and data
const TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// png with a tEXt chunk "keyword\0text" inserted after IHDR (8 bytes of
// signature, then IHDR: 4 length, 4 type, 13 data, 4 CRC)
function stamp(png, keyword, text) {
  const data = Buffer.concat([Buffer.from(keyword, 'latin1'), Buffer.from([0]), Buffer.from(text, 'latin1')]);
  const type = Buffer.from('tEXt', 'latin1');
  const len = Buffer.alloc(4), crc = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  crc.writeUInt32BE(crc32(Buffer.concat([type, data])));
  if (png.toString('latin1', 12, 16) !== 'IHDR') throw new Error('not a PNG with IHDR first');
  return Buffer.concat([png.subarray(0, 33), len, type, data, crc, png.subarray(33)]);
}

const browser = await chromium.launch({
  executablePath: arg('chromium', '/usr/bin/chromium'), timeout: 30000,
  args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--no-first-run',
         '--hide-scrollbars', '--font-render-hinting=none'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto('file://' + path.resolve(arg('page')));
  await page.waitForSelector('body[data-ready=yes]', { timeout: 20000 });
  for (const k of arg('keys', '').split(',').filter(Boolean)) await page.keyboard.press(k);
  if (errors.length) throw new Error('the page logged: ' + errors.join('; '));
  const png = await page.screenshot({ fullPage: true });
  fs.writeFileSync(arg('out'), stamp(png, 'trace-page', arg('stamp')));
  console.log(`trace_screenshot: ${arg('out')}, step ${await page.evaluate(() => document.body.dataset.step)}, ` +
              `${(fs.statSync(arg('out')).size / 1e3).toFixed(0)} KB`);
} finally {
  await browser.close();
}
