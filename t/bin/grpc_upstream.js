#!/usr/bin/env node
// A gRPC-shaped test upstream (HTTP/2 without TLS, as nginx's grpc_pass
// speaks to grpc:// upstreams) that records the metadata it receives.
// Node's own http2 module only: what is checked is the header block nginx
// sends, not any message.
//
//   node grpc_upstream.js --port PORT --out FILE
//
// Each call becomes one JSON line in FILE, written before the answer:
//   { "proto": "grpc", "uri": ":path", "headers": { name: [values...] } }
// The answer is an empty message with grpc-status 0; to a :path with
// "/streamN" in it, N messages of 64 bytes, one every 100 ms (a server
// streaming call), then grpc-status 0. Prints
// "listening PORT"; SIGTERM, or the parent's end, stops it.
'use strict';

const fs = require('fs');
const http2 = require('http2');

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
}
if (!args.out) {
  process.stderr.write('usage: grpc_upstream.js --port PORT --out FILE\n');
  process.exit(2);
}

const server = http2.createServer();
server.on('stream', (stream, headers) => {
  const recorded = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith(':')) continue;
    recorded[name] = Array.isArray(value) ? value : [String(value)];
  }
  fs.appendFileSync(args.out, JSON.stringify({
    proto: 'grpc', uri: headers[':path'], headers: recorded }) + '\n');
  stream.on('data', () => {});
  stream.on('end', () => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' },
                   { waitForTrailers: true });
    stream.on('wantTrailers', () => {
      stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': '' });
    });
    const many = /\/stream(\d+)/.exec(headers[':path']);
    if (!many) {
      // One empty message: flag 0, length 0.
      stream.end(Buffer.alloc(5));
      return;
    }
    let left = Number(many[1]);
    const message = Buffer.alloc(5 + 64, 0x61);
    message.writeUInt8(0, 0);
    message.writeUInt32BE(64, 1);
    const timer = setInterval(() => {
      if (stream.destroyed) {
        clearInterval(timer);
      } else if (left-- > 0) {
        stream.write(message);
      } else {
        clearInterval(timer);
        stream.end();
      }
    }, 100);
  });
});

server.listen(Number(args.port || 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});

const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.exit(0);
}, 500).unref();
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
