// check.mjs - the page of infer --trace-html in a real browser: Debian's
// chromium, headless, driven by playwright-core (tests/browser.sh runs it).
//
//   node check.mjs --page P.html --trace T.txt [--soak S.html --soak-steps N]
//
// P.html and T.txt are one run of data/workload-preempt.jsonl on the step
// clock, with --trace-html and --trace. The text trace says, on its own
// terms, which step made the first preemption, what the pool looked like
// after it (the KV map it printed), the step's counts, and the state of every
// request then (replayed from its lines); the page is stepped there with the
// keyboard and must show the same. Then the keys, the console (no error),
// the network (nothing but the file), and a planted change: a copy of the
// page whose data moves one block to another owner at that step must fail
// the same comparison. With --fork, the page of a wall-clock run whose
// request has three samples: the fork's shared block ('*') and the copy on
// write are drawn, and the step's stage times shown. With --soak, a page of
// N steps is opened and stepped, and its size, load time and time per step
// are printed.
// Prints "browser: N passed, N failed"; exits 1 on any failure.
import fs from 'node:fs';
import path from 'node:path';

const arg = (name, dflt) => {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const PAGE = arg('page'), TRACE = arg('trace'), SOAK = arg('soak'), SOAK_STEPS = +arg('soak-steps', 0), FORK = arg('fork');
const CHROMIUM = arg('chromium', '/usr/bin/chromium');
const { chromium } = await import(path.resolve(arg('playwright', 'node_modules/playwright-core/index.mjs')));

let pass = 0, fail = 0;
function ok(cond, what) {
  if (cond) pass++;
  else { fail++; console.log('FAIL: ' + what); }
}

// ---- the text trace, read on its own ----
function readTrace(text) {
  const lines = text.split('\n');
  const states = new Map(), finishedAt = new Map();
  const stepOf = (k) => {   // the step an event line belongs to: the next step line's
    for (let j = k; j < lines.length; j++) {
      const m = /\] step (\d+):/.exec(lines[j]);
      if (m) return +m[1];
    }
    return -1;
  };
  const first = (re) => { const k = lines.findIndex((l) => re.test(l)); return k < 0 ? -1 : stepOf(k); };
  const last = (re) => { let k = -1; lines.forEach((l, j) => { if (re.test(l)) k = j; }); return k < 0 ? -1 : stepOf(k); };
  const out = {
    preempt: first(/\] #\d+ preempted/), lastPreempt: last(/\] #\d+ preempted/),
    resume: first(/\] #\d+ resumed/), finish: first(/\] #\d+ finished/),
    hit: first(/prefix cache hit/), cow: first(/copy-on-write/),
    steps: +(/in (\d+) steps of the step clock/.exec(text) || [0, -1])[1],
  };
  // replay every line up to the step line of the first preemption
  for (let k = 0; k < lines.length; k++) {
    const m = /^\[\s*([\d.]+) ms\] (.*)$/.exec(lines[k]);
    if (!m) continue;
    const at = +m[1], ev = m[2];
    let r;
    if ((r = /^#(\d+) arrived/.exec(ev))) states.set(+r[1], 'queued');
    else if ((r = /^#(\d+) (admitted|resumed) /.exec(ev))) states.set(+r[1], 'prefill');
    else if ((r = /^#(\d+) forked from/.exec(ev))) states.set(+r[1], 'prefill');
    else if ((r = /^#(\d+) prefill \[\d+, \d+\)$/.exec(ev))) states.set(+r[1], 'decode');   // a token follows in this step
    else if ((r = /^#(\d+) first token/.exec(ev))) states.set(+r[1], 'decode');
    else if ((r = /^#(\d+) preempted/.exec(ev))) states.set(+r[1], 'preempted');
    else if ((r = /^#(\d+) finished/.exec(ev))) { states.set(+r[1], 'finished'); finishedAt.set(+r[1], at); }
    const s = /^step (\d+): (\d+) seqs? \((\d+) prefill, (\d+) decode tokens\), (\d+) of (\d+) tokens; KV (\d+) held, (\d+) cached, (\d+) free/.exec(ev);
    if (!s || +s[1] !== out.preempt) continue;
    out.counts = { seqs: +s[2], prefill: +s[3], decode: +s[4], tokens: +s[5], budget: +s[6], held: +s[7], cached: +s[8], free: +s[9] };
    let map = '';
    for (let j = k + 2; j < lines.length; j++) {   // after the "KV pool, N blocks" line
      const row = /^\s+(\d+) (\S+)$/.exec(lines[j]);
      if (!row || +row[1] !== map.length) break;
      map += row[2];
    }
    out.map = map;
    out.states = {};   // the requests the page lists: not finished before this step
    for (const [id, st] of states) if (!finishedAt.has(id) || finishedAt.get(id) >= at) out.states[id] = st;
    out.running = Object.values(out.states).filter((x) => x === 'prefill' || x === 'decode').length;
    out.waiting = Object.values(out.states).filter((x) => x === 'queued' || x === 'preempted').length;
    break;
  }
  return out;
}

// ---- the page ----
async function open(browser, file) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const errors = [], urls = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') errors.push(m.type() + ': ' + m.text()); });
  page.on('pageerror', (e) => errors.push('exception: ' + e.message));
  page.on('request', (r) => urls.push(r.url()));
  const t0 = Date.now();
  await page.goto('file://' + path.resolve(file));
  await page.waitForSelector('body[data-ready=yes]', { timeout: 20000 });
  return { page, errors, urls, wallMs: Date.now() - t0 };
}

// what the page shows at its cursor
function shown(page) {
  return page.evaluate(() => {
    const counts = {};
    document.querySelectorAll('#counts [data-k]').forEach((b) => { counts[b.dataset.k] = +b.textContent; });
    const states = {};
    document.querySelectorAll('#requests tr[data-id]').forEach((tr) => { states[tr.dataset.id] = tr.dataset.state; });
    return {
      step: +document.body.dataset.step,
      cells: Array.from(document.querySelectorAll('#kv-grid .cell')).map((c) => c.dataset.ch).join(''),
      chars: document.getElementById('kv-chars').textContent,
      title: document.getElementById('step-title').textContent,
      playing: document.body.dataset.playing, slider: +document.getElementById('slider').value,
      counts, states,
    };
  });
}

// the page at the text trace's step, compared: a list of what differs
function differences(want, got) {
  const d = [];
  if (got.step !== want.preempt) d.push(`the page shows step ${got.step}, not ${want.preempt}`);
  if (got.cells !== want.map) d.push(`KV map: the page's blocks say ${got.cells}, the text trace ${want.map}`);
  if (got.chars !== want.map) d.push(`KV map: the page's map line says ${got.chars}, the text trace ${want.map}`);
  for (const k of Object.keys(want.counts))
    if (got.counts[k] !== want.counts[k]) d.push(`${k}: the page says ${got.counts[k]}, the text trace ${want.counts[k]}`);
  if (got.counts.running !== want.running || got.counts.waiting !== want.waiting)
    d.push(`requests running/waiting: the page's step says ${got.counts.running}/${got.counts.waiting}, ` +
           `the text trace's states ${want.running}/${want.waiting}`);
  const ids = new Set([...Object.keys(want.states), ...Object.keys(got.states)]);
  for (const id of ids)
    if (want.states[id] !== got.states[id]) d.push(`#${id}: the page says ${got.states[id]}, the text trace ${want.states[id]}`);
  return d;
}

async function key(page, k) { await page.keyboard.press(k); return (await shown(page)).step; }

const browser = await chromium.launch({
  executablePath: CHROMIUM, timeout: 30000,
  args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--no-first-run',
         '--disable-default-apps', '--disable-sync'],
});
try {
  const want = readTrace(fs.readFileSync(TRACE, 'utf8'));
  ok(want.preempt > 0 && want.map && want.map.length > 0, `the text trace shows no preemption with a KV map (step ${want.preempt})`);
  ok(Object.keys(want.states).length >= 3, 'the text trace names fewer than 3 requests at the first preemption');

  const { page, errors, urls } = await open(browser, PAGE);
  // the keys, from the first step
  ok(await key(page, 'Home') === 1, 'Home does not go to step 1');
  ok(await key(page, 'p') === want.preempt, `p does not go to the first preemption, step ${want.preempt}`);
  const at = await shown(page);
  const diff = differences(want, at);
  ok(diff.length === 0, 'the page disagrees with the text trace at the first preemption:\n  ' + diff.join('\n  '));
  ok(at.title.includes('Step ' + want.preempt), `the step's title says "${at.title}"`);
  console.log(`browser: step ${want.preempt}, the first preemption: KV ${at.cells} on the page and in the text trace; ` +
              Object.entries(at.states).map(([id, s]) => `#${id} ${s}`).join(', '));
  ok(await key(page, 'ArrowRight') === want.preempt + 1, 'ArrowRight does not step forward');
  ok(await key(page, 'ArrowLeft') === want.preempt, 'ArrowLeft does not step back');
  ok(await key(page, 'Shift+ArrowRight') === want.preempt + 10, 'Shift+ArrowRight does not go ten steps');
  ok(await key(page, 'End') === want.steps, `End does not go to the last step, ${want.steps}`);
  ok((await shown(page)).slider === want.steps - 1, 'the slider does not follow the keys');
  ok(await key(page, 'Shift+P') === want.lastPreempt, `Shift+P from the end does not go to the last preemption, ${want.lastPreempt}`);
  ok(await key(page, 'Home') === 1, 'Home does not go back to step 1');
  ok(await key(page, 'r') === want.resume, `r does not go to the first resume, step ${want.resume}`);
  ok(await key(page, 'Home') === 1 && await key(page, 'h') === want.hit, `h does not go to the first prefix hit, step ${want.hit}`);
  ok(await key(page, 'Home') === 1 && await key(page, 'f') === want.finish, `f does not go to the first finish, step ${want.finish}`);
  if (want.cow < 0) ok(await key(page, 'Home') === 1 && await key(page, 'c') === 1, 'c moved though the run copied no block');
  await key(page, 'Home');
  await page.keyboard.press(' ');
  ok((await shown(page)).playing === 'yes', 'space does not start playing');
  await page.waitForTimeout(400);
  await page.keyboard.press(' ');
  const played = await shown(page);
  ok(played.playing === 'no' && played.step > 1, `space does not pause, or playing did not move (step ${played.step})`);
  await key(page, 'Home');
  await page.click('.jumps button[data-kind=P]');
  ok((await shown(page)).step === want.preempt, 'the preemption button does not jump to the first preemption');
  ok(errors.length === 0, 'the console logged: ' + errors.join('; '));
  ok(urls.length === 1 && urls[0].startsWith('file://'), 'the page asked for more than itself: ' + urls.join(' '));
  await page.close();

  // a planted change: one block of that step moved to another owner in a copy of the page
  const html = fs.readFileSync(PAGE, 'utf8');
  const lines = html.split('\n');
  const k = lines.findIndex((l) => l.startsWith(`["S",${want.preempt},`));
  const rec = k < 0 ? null : JSON.parse(lines[k].replace(/,$/, ''));
  if (!rec || !Array.isArray(rec[18])) {
    ok(false, `cannot plant a change: step ${want.preempt}'s record holds no KV picture`);
  } else {
    const table = rec[18][1].find((t) => t.length > 2), spare = want.map.search(/[.+]/);
    ok(table && spare >= 0, 'cannot plant a change: no held and no unheld block at that step');
    if (table && spare >= 0) {
      table[table.length - 1] = spare;   // the owner's last block is now one the map says nobody holds
      lines[k] = JSON.stringify(rec) + (lines[k].endsWith(',') ? ',' : '');
      const planted = path.join(path.dirname(PAGE), 'planted.html');
      fs.writeFileSync(planted, lines.join('\n'));
      const p2 = await open(browser, planted);
      await key(p2.page, 'p');
      const d2 = differences(want, await shown(p2.page));
      ok(d2.some((x) => x.startsWith('KV map')), 'a planted change of the KV map passed the comparison');
      ok(p2.errors.some((x) => x.includes('disagree')), 'the planted page did not say its map and tables disagree');
      console.log('browser: planted change (#' + table[0] + "'s last block moved to block " + spare + ') caught: ' +
                  (d2.find((x) => x.startsWith('KV map')) || 'no'));
      await p2.page.close();
    }
  }

  // forks and copies on write, on the wall clock
  if (FORK) {
    const f = await open(browser, FORK);
    await key(f.page, 'Home');
    const shared = await f.page.evaluate(() => document.querySelectorAll('#kv-grid .cell[data-ch="*"]').length);
    ok(shared > 0, 'no block is drawn shared at the step the samples forked');
    const cowStep = await key(f.page, 'c');
    const cow = await f.page.evaluate(() => ({
      said: document.querySelectorAll('#events li[data-kind=C]').length,
      marked: document.querySelectorAll('#kv-grid .mark.cow').length,
      bad: document.querySelectorAll('#kv-grid .cell.bad').length,
      when: document.getElementById('counts').textContent,
    }));
    ok(cowStep > 1 && cow.said > 0 && cow.marked === cow.said && cow.bad === 0,
       `c does not show the copies on write (step ${cowStep}: ${cow.said} told, ${cow.marked} blocks marked, ${cow.bad} in doubt)`);
    ok(/schedule [\d.]+, build [\d.]+, forward [\d.]+/.test(cow.when), 'a wall-clock step does not show its stage times: ' + cow.when);
    await key(f.page, 'End');
    ok(f.errors.length === 0, 'the fork page logged: ' + f.errors.join('; '));
    await f.page.close();
  }

  // the scale: a long run's page opens and steps without lag
  if (SOAK) {
    const bytes = fs.statSync(SOAK).size;
    const s = await open(browser, SOAK);
    const steps = await s.page.evaluate(() => +document.body.dataset.steps);
    ok(steps === SOAK_STEPS, `the long page holds ${steps} steps, not ${SOAK_STEPS}`);
    const inPage = await s.page.evaluate(() => +document.body.dataset.loadMs);
    const t = await s.page.evaluate(() => {   // each step drawn and laid out, timed in the page
      const times = [];
      const press = (k) => {
        const t0 = performance.now();
        document.dispatchEvent(new KeyboardEvent('keydown', { key: k, bubbles: true }));
        void document.body.offsetHeight;
        times.push(performance.now() - t0);
      };
      for (let i = 0; i < 300; i++) press(i % 30 === 29 ? 'p' : i % 10 === 9 ? 'PageDown' : 'ArrowRight');
      press('End'); press('Home'); press('End');
      times.sort((a, b) => a - b);
      return { mean: times.reduce((a, b) => a + b, 0) / times.length, max: times[times.length - 1],
               p95: times[Math.floor(times.length * 0.95)], step: +document.body.dataset.step };
    });
    ok(t.step === SOAK_STEPS, `End on the long page shows step ${t.step}, not ${SOAK_STEPS}`);
    ok(s.errors.length === 0, 'the long page logged: ' + s.errors.join('; '));
    ok(inPage < 10000, `the long page took ${inPage} ms to load`);
    ok(t.mean < 50 && t.max < 500, `a step of the long page takes ${t.mean.toFixed(1)} ms on average, ${t.max.toFixed(1)} at most`);
    console.log(`browser: the ${steps}-step page: ${(bytes / 1e6).toFixed(2)} MB, ready ${inPage.toFixed(0)} ms after ` +
                `navigation began (${s.wallMs} ms from goto); a step drawn in ${t.mean.toFixed(1)} ms on average, ` +
                `${t.p95.toFixed(1)} ms at the 95th percentile, ${t.max.toFixed(1)} ms at most (303 steps and jumps)`);
    await s.page.close();
  }
} catch (e) {
  ok(false, 'the check stopped: ' + e.message);
} finally {
  await browser.close();
}
console.log(`browser: ${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
