// server_load.js - the hostile loads of tests/server.sh (steps 14 and 15),
// each beside one well-behaved client whose completion is timed:
//
//   node tests/server_load.js sockets URL
//       2,000 sockets that send nothing and 500 that send a header line every
//       half second and never finish; prints "ALIVE STATUS within 1 s|slow (MS ms)"
//   node tests/server_load.js bodies URL PID
//       1,000 sockets that each send the headers of a 1 MiB body and all of it
//       but its last byte, and hold it; prints "RSS_BEFORE RSS_HELD REFUSED_503
//       OTHER STATUS MS" (RSS of process PID, kB, from /proc)
const net = require("net"), http = require("http"), fs = require("fs");
const [mode, where, pid] = process.argv.slice(2);
const url = new URL(where);
const sleep = ms => new Promise(r => setTimeout(r, ms));
const socks = [];

// a socket, once connected (or failed); hello(s) runs on connect
const open = hello => new Promise(res => {
  const s = net.connect(+url.port, url.hostname, () => { if (hello) hello(s); res(s); });
  s.on("error", () => res(s));
  socks.push(s);
});
// n sockets, opened a hundred at a time
const openMany = async (n, hello) => {
  const all = [];
  for (let i = 0; i < n; i += 100) all.push(...await Promise.all(Array.from({length: Math.min(100, n - i)}, () => open(hello))));
  return all;
};
// the well-behaved client: a small completion, its status and time
const served = async () => {
  const t0 = Date.now();
  const status = await new Promise(res => {
    const r = http.request({host: url.hostname, port: url.port, path: "/v1/completions", method: "POST", agent: false,
      headers: {"Content-Type": "application/json"}}, a => { a.resume(); a.on("end", () => res(a.statusCode)); });
    r.on("error", e => res("error " + e.code));
    r.end('{"prompt": "ROMEO:", "max_tokens": 8}');
  });
  return [status, Date.now() - t0];
};
const rss = () => +fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1];

(async () => {
  if (mode === "sockets") {
    await openMany(2000);
    const slow = await openMany(500, s => s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"));
    const drip = setInterval(() => { for (const s of slow) if (!s.destroyed) s.write("X-Slow: 1\r\n"); }, 500);
    await sleep(1000);
    const alive = socks.filter(s => !s.destroyed).length;
    const [status, ms] = await served();
    clearInterval(drip);
    console.log(`${alive} ${status} ${ms < 1000 ? "within 1 s" : "slow"} (${ms} ms)`);
  } else if (mode === "bodies") {
    const MB = 1 << 20, body = Buffer.alloc(MB - 1, 0x61);   // one buffer, written to every socket
    const before = rss();
    let refused = 0, other = 0;
    await openMany(1000, s => {
      s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + MB + "\r\n\r\n");
      s.write(body);
      s.once("data", d => String(d).startsWith("HTTP/1.1 503 ") ? refused++ : other++);
    });
    await sleep(3000);   // the server reads what it will keep
    const held = rss();
    const [status, ms] = await served();
    console.log(`${before} ${held} ${refused} ${other} ${status} ${ms}`);
  } else {
    console.log("usage: node tests/server_load.js sockets|bodies URL [PID]");
    process.exitCode = 2;
  }
  for (const s of socks) s.destroy();
})();
