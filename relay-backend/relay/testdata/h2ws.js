// h2ws.js: a WebSocket client over HTTP/2 written with Node.js's built-in
// http2 module, to check relay-backend against a client we did not write
// (TestH2NodeClient). It connects to http://127.0.0.1:PORT with prior
// knowledge, opens two extended CONNECT streams (RFC 8441) for ROOM with
// ?hello=1 on that one session, reads both hello frames, sends a masked
// text frame on the first and reads it on the second, then closes both
// with 1000 and prints one JSON line with what it saw.
//
// Usage: node h2ws.js PORT ROOM TEXT
'use strict';
const http2 = require('node:http2');
const crypto = require('node:crypto');

const [port, room, text] = process.argv.slice(2);
const timer = setTimeout(() => fail('timed out'), 10000);

function fail(why) {
  console.log(JSON.stringify({ error: String(why) }));
  process.exit(1);
}

// frame encodes one masked client frame (RFC 6455 section 5.2).
function frame(opcode, payload) {
  const key = crypto.randomBytes(4);
  let head;
  if (payload.length < 126) {
    head = Buffer.from([0x80 | opcode, 0x80 | payload.length]);
  } else {
    head = Buffer.alloc(4);
    head[0] = 0x80 | opcode;
    head[1] = 0x80 | 126;
    head.writeUInt16BE(payload.length, 2);
  }
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i] ^= key[i % 4];
  return Buffer.concat([head, key, body]);
}

// reader returns next(), a promise of the next whole server frame
// ({opcode, payload}) from the stream's DATA.
function reader(stream) {
  let buf = Buffer.alloc(0);
  const waiting = [];
  const pump = () => {
    while (waiting.length > 0 && buf.length >= 2) {
      let len = buf[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        len = Number(buf.readBigUInt64BE(2));
        off = 10;
      }
      if (buf[1] & 0x80) return fail('server frame is masked');
      if (buf.length < off + len) return;
      const f = { opcode: buf[0] & 0x0f, payload: buf.subarray(off, off + len) };
      buf = buf.subarray(off + len);
      waiting.shift()(f);
    }
  };
  stream.on('data', (d) => { buf = Buffer.concat([buf, d]); pump(); });
  return () => new Promise((resolve) => { waiting.push(resolve); pump(); });
}

const session = http2.connect(`http://127.0.0.1:${port}`);
session.on('error', fail);
session.on('remoteSettings', async (settings) => {
  try {
    if (!settings.enableConnectProtocol) fail('the server did not enable extended CONNECT');
    const open = () => new Promise((resolve, reject) => {
      const s = session.request({
        ':method': 'CONNECT',
        ':protocol': 'websocket',
        ':scheme': 'http',
        ':path': `/room/${room}?hello=1`,
        ':authority': `127.0.0.1:${port}`,
        'sec-websocket-version': '13',
        'origin': 'http://node.test',
      });
      s.on('error', reject);
      s.on('response', (h) => resolve({ s, status: h[':status'], next: reader(s) }));
    });
    const a = await open();
    const b = await open();
    const helloA = JSON.parse((await a.next()).payload.toString());
    const helloB = JSON.parse((await b.next()).payload.toString());
    a.s.write(frame(0x1, text));
    const got = await b.next();
    const closes = [];
    for (const m of [a, b]) {
      const code = Buffer.alloc(2);
      code.writeUInt16BE(1000, 0);
      m.s.write(frame(0x8, code));
      const reply = await m.next();
      closes.push(reply.opcode === 0x8 ? reply.payload.readUInt16BE(0) : -reply.opcode);
      m.s.end();
    }
    clearTimeout(timer);
    console.log(JSON.stringify({
      status: [a.status, b.status],
      hello: [helloA.type, helloB.type, helloA.room],
      clients: [helloA.client, helloB.client],
      got: { opcode: got.opcode, text: got.payload.toString() },
      closes,
      settings: { enableConnectProtocol: settings.enableConnectProtocol, maxConcurrentStreams: settings.maxConcurrentStreams },
    }));
    session.close();
  } catch (e) {
    fail(e && e.stack || e);
  }
});
