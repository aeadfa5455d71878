// h2errors.js: the error cases of WebSockets over HTTP/2 (RFC 8441), with
// an HTTP/2 client we did not write: Node.js's built-in http2 module,
// against the gateway's TLS listener with gateway.tls.h2 on and
// h2_max_streams = 2 (TestClientH2NodeJSErrors). On one session it sends a
// CONNECT without :protocol, an extended CONNECT whose :path is not a
// path, then opens a WebSocket, reads its hello, writes half a frame and
// resets the stream. On a second session it opens three requests at once,
// before the gateway's SETTINGS are read (so nghttp2 does not hold the
// third back), whose bodies never end: the third is over the limit. It
// prints one JSON line with what it saw.
//
// Usage: node h2errors.js PORT CA_FILE
'use strict';
const http2 = require('node:http2');
const crypto = require('node:crypto');
const fs = require('node:fs');

const [port, caFile] = process.argv.slice(2);
const ca = fs.readFileSync(caFile);
const url = `https://127.0.0.1:${port}`;
const tls = { ca, servername: 'gw.test' };
const timer = setTimeout(() => fail('timed out'), 15000);

function fail(why) {
  console.log(JSON.stringify({ error: String(why) }));
  process.exit(1);
}

// frameHead is the head of a masked client text frame of len bytes
// (RFC 6455 section 5.2), with its key.
function frameHead(len) {
  return Buffer.concat([Buffer.from([0x81, 0x80 | len]), crypto.randomBytes(4)]);
}

// outcome resolves with a stream's status, or its RST_STREAM code.
function outcome(s) {
  return new Promise((resolve) => {
    let status = 0;
    s.on('response', (h) => { status = h[':status']; s.resume(); });
    s.on('error', () => {});
    s.on('close', () => resolve({ status, rstCode: s.rstCode }));
  });
}

async function firstSession() {
  const session = http2.connect(url, tls);
  session.on('error', fail);
  const settings = await new Promise((resolve) => session.once('remoteSettings', resolve));
  const out = { settings: { enableConnectProtocol: settings.enableConnectProtocol, maxConcurrentStreams: settings.maxConcurrentStreams } };

  // A plain CONNECT: no :protocol, so a request to tunnel TCP.
  out.noProtocol = await outcome(session.request({ ':method': 'CONNECT', ':authority': 'gw.test:443' }));

  // :path that is not an absolute path: a malformed request.
  out.badPath = await outcome(session.request({
    ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':authority': 'gw.test',
    ':path': 'room/x', 'sec-websocket-version': '13',
  }));

  // A WebSocket reset with half a frame written.
  const ws = session.request({
    ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':authority': 'gw.test',
    ':path': '/room/reset?hello=1', 'sec-websocket-version': '13',
  });
  ws.on('error', () => {});
  out.reset = await new Promise((resolve) => {
    ws.on('response', (h) => {
      ws.once('data', () => { // the hello frame
        ws.write(Buffer.concat([frameHead(100), Buffer.alloc(10, 0x61)]), () => {
          ws.close(http2.constants.NGHTTP2_CANCEL);
          resolve({ status: h[':status'] });
        });
      });
    });
  });
  session.close();
  return out;
}

async function secondSession() {
  const session = http2.connect(url, tls);
  session.on('error', fail);
  await new Promise((resolve) => session.once('connect', resolve));
  // Synchronously, in the 'connect' tick: nghttp2 still assumes its
  // default limit, so all three HEADERS go out.
  const streams = [0, 1, 2].map(() => session.request({ ':method': 'POST', ':path': '/api/slow' }, { endStream: false }));
  const results = streams.map(outcome);
  const third = await results[2];
  for (const s of streams.slice(0, 2)) s.close(http2.constants.NGHTTP2_CANCEL);
  await Promise.all(results);
  session.close();
  return { third };
}

(async () => {
  try {
    const out = await firstSession();
    out.tooMany = await secondSession();
    clearTimeout(timer);
    console.log(JSON.stringify(out));
  } catch (e) {
    fail(e && e.stack || e);
  }
})();
