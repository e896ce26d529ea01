#!/usr/bin/env node
// An HTTP/2 client (prior knowledge, h2c; or h2 over TLS by ALPN, any
// certificate taken, with "tls": true) that sends many requests as
// concurrent streams of one connection, with header values as bytes no
// well-behaved client sends, and resets some streams itself. Node's own
// http2 module only: it sends a header value's code points below 256 as
// those bytes (NUL, controls, latin-1 that is invalid UTF-8), repeats a
// name given several values as separate fields (as HTTP/2 splits
// cookies), and HPACK-indexes what it may: a value sent again on the
// connection goes as an index into the dynamic table, one named in
// "sensitive" as a never-indexed literal.
//
//   node h2_client.js < plan.json > results.json
//
// plan: { "port": N, "tls": true,
//         "settings": { "initialWindowSize": N, ... },
//         "requests": [ { "path": "/x", "method": "GET",
//           "headers": [[name, value], ...], "sensitive": [names],
//           "body": "text", "more_body": true,
//           "reset_after": bytes, "reset_after_ms": ms,
//           "connection": N } ] }
// Requests with the same connection number (default 0) are streams of
// one connection, made when its first request is sent.
// A request with reset_after is reset (RST_STREAM CANCEL) once that many
// bytes of its response body came (0: as soon as its headers came); one
// with reset_after_ms, that long after it was sent. With more_body, the
// body sent is only the start: the stream stays open for more.
// results: one per request, in order: { "status": N or 0, "bytes": N,
// "body": the first 64 bytes, "reset": true when we reset it, "error":
// the stream's error code when it failed, "timeout" when it had no answer
// after plan.timeout_ms (30 s) }.
'use strict';

const http2 = require('http2');

let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const plan = JSON.parse(input);
  const results = plan.requests.map(() => ({ status: 0, bytes: 0, body: '' }));
  const sessions = new Map();
  const connect = (n) => {
    if (sessions.has(n)) return sessions.get(n);
    const scheme = plan.tls ? 'https' : 'http';
    const session = http2.connect(`${scheme}://127.0.0.1:${plan.port}`, {
      rejectUnauthorized: false,
      // Room for every stream of the plan at once, and for big header
      // blocks: the server's limits are what is tested.
      maxSendHeaderBlockLength: 1 << 20,
      peerMaxConcurrentStreams: plan.requests.length,
      // Ours (a small initialWindowSize makes the server wait for each
      // WINDOW_UPDATE, sent as a stream's data is read).
      settings: plan.settings || {},
    });
    session.on('error', (e) => {
      results.sessionError = e.code || e.message;
    });
    sessions.set(n, session);
    return session;
  };
  let left = plan.requests.length;
  const finish = () => {
    process.stdout.write(JSON.stringify(results) + '\n');
    process.exit(0);
  };
  const done = () => {
    if (--left > 0) return;
    for (const session of sessions.values()) session.close();
    finish();
  };
  // A server that never answers some stream must not hang the test: what
  // came by then is the result, and the streams still open say so.
  setTimeout(() => {
    results.forEach((r) => { if (!r.status && !r.error) r.error = 'timeout'; });
    finish();
  }, plan.timeout_ms || 30000).unref();

  plan.requests.forEach((q, i) => {
    const res = results[i];
    const session = connect(q.connection || 0);
    const headers = {
      ':method': q.method || 'GET',
      ':path': q.path,
    };
    for (const [name, value] of q.headers || []) {
      const n = name.toLowerCase();
      if (headers[n] === undefined) headers[n] = value;
      else headers[n] = [].concat(headers[n], value);
    }
    if (q.sensitive) headers[http2.sensitiveHeaders] = q.sensitive;
    let req;
    try {
      req = session.request(headers, { endStream: q.body === undefined });
    } catch (e) {
      res.error = e.code || e.message;
      done();
      return;
    }
    const reset = () => {
      if (res.reset || req.closed) return;
      res.reset = true;
      req.close(http2.constants.NGHTTP2_CANCEL);
    };
    if (q.body !== undefined) {
      const body = Buffer.from(q.body, 'latin1');
      if (q.more_body) req.write(body);
      else req.end(body);
    }
    if (q.reset_after_ms !== undefined) setTimeout(reset, q.reset_after_ms);
    req.on('response', (h) => {
      res.status = h[':status'];
      if (q.reset_after === 0) reset();
    });
    req.on('data', (d) => {
      if (res.bytes < 64) {
        res.body += d.subarray(0, 64 - res.bytes).toString('latin1');
      }
      res.bytes += d.length;
      if (q.reset_after !== undefined && res.bytes >= q.reset_after) reset();
    });
    req.on('error', (e) => { res.error = e.code || e.message; });
    req.on('close', () => {
      if (!res.reset && req.rstCode) res.error = res.error || req.rstCode;
      done();
    });
  });
});
