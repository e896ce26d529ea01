#!/usr/bin/env node
// An OTLP/gRPC receiver for spanprof's integration tests, built only from
// code nobody on this project wrote: grpc-js for the transport,
// otlp-transformer's generated decoders for OTLP, pprof-format for pprof.
// It must stay independent of our encoders: it loads no .proto file of
// ours and decodes with the upstream field numbers baked into those
// packages.
//
// Usage:
//   node receiver.js --port PORT --out FILE [--host ADDR]
//        [--tls-cert PEM --tls-key PEM] [--control FILE]
//        [--status CODE|NAME] [--message TEXT] [--times N] [--stall-ms MS]
//        [--partial-rejected N] [--partial-message TEXT]
//        [--services logs,traces]
//
// --services: the OTLP services it implements (default both). A method
// of one left out is answered UNIMPLEMENTED by grpc-js itself, as by a
// collector that implements traces only (Jaeger's OTLP receiver); such a
// request is not recorded.
//
// Every request becomes one JSON line in FILE, written before the answer
// (so a stalled or refused request is recorded too):
//   { "time_ms", "signal": "logs"|"traces", "path", "peer", "metadata",
//     "request" (the decoded message, 64-bit numbers as strings, bytes as
//     lowercase hex), "decode_error" (instead of "request" when the bytes
//     are not a valid message; answered INVALID_ARGUMENT),
//     "answer": { "code", "message", "stall_ms" } }
// A LogRecord whose attribute profiling.data.format is pprof-gzip-base64
// gets "pprof": { "profile" (pprof-format's Profile as plain JSON),
// "resolved" (samples with their frames' names, files, lines and labels
// looked up in the string table) } or "pprof_error".
//
// How to answer comes from the flags, overridden field by field by the
// JSON object in the control file, re-read on every request (write it
// with a rename so a request never sees half of it):
//   status   gRPC code (number or name, e.g. "RESOURCE_EXHAUSTED"); 0 = OK
//   message  status text for a non-OK answer
//   times    only the next N requests get that status, then OK; the count
//            restarts whenever the control file's content changes
//   stall_ms wait this long before answering; -1 = never answer (the
//            client's deadline ends the call)
//   partial  { "rejected": N, "message": TEXT }: an OK answer with
//            partial_success
//   exit     true: exit at once (also polled every 100 ms)
// SIGTERM and SIGINT stop it, and so does its parent's end. Once listening
// it prints "listening PORT".
'use strict';

const fs = require('fs');
const zlib = require('zlib');
const grpc = require('@grpc/grpc-js');
const root = require(
    '@opentelemetry/otlp-transformer/build/src/generated/root');
const pprof = require('pprof-format');

const otlp = root.opentelemetry.proto.collector;

const SERVICES = [
    {
        signal: 'logs',
        path: '/opentelemetry.proto.collector.logs.v1.LogsService/Export',
        request: otlp.logs.v1.ExportLogsServiceRequest,
        response: otlp.logs.v1.ExportLogsServiceResponse,
        partial: (n, msg) => ({ rejectedLogRecords: n, errorMessage: msg }),
    },
    {
        signal: 'traces',
        path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
        request: otlp.trace.v1.ExportTraceServiceRequest,
        response: otlp.trace.v1.ExportTraceServiceResponse,
        partial: (n, msg) => ({ rejectedSpans: n, errorMessage: msg }),
    },
];

function usage(msg) {
    process.stderr.write(`receiver: ${msg}\n`);
    process.exit(2);
}

function parseArgs(argv) {
    const opts = {
        host: '127.0.0.1', port: null, out: null, tlsCert: null,
        tlsKey: null, control: null, plan: {}, decode: true,
        services: ['logs', 'traces'],
    };
    const takes = new Set(['--host', '--port', '--out', '--tls-cert',
        '--tls-key', '--control', '--status', '--message', '--times',
        '--stall-ms', '--partial-rejected', '--partial-message',
        '--decode', '--services']);
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (!takes.has(a)) usage(`unknown argument ${a}`);
        if (i + 1 >= argv.length) usage(`${a} needs a value`);
        const v = argv[++i];
        switch (a) {
        case '--host': opts.host = v; break;
        case '--port': opts.port = Number(v); break;
        case '--out': opts.out = v; break;
        case '--tls-cert': opts.tlsCert = v; break;
        case '--tls-key': opts.tlsKey = v; break;
        case '--control': opts.control = v; break;
        case '--status': opts.plan.status = v; break;
        case '--message': opts.plan.message = v; break;
        case '--times': opts.plan.times = Number(v); break;
        case '--stall-ms': opts.plan.stall_ms = Number(v); break;
        // "no": answer and record sizes only, for benchmarks whose load
        // generator shares a CPU with the receiver.
        case '--decode': opts.decode = v !== 'no'; break;
        case '--services':
            opts.services = v.split(',').filter((x) => x !== '');
            for (const x of opts.services) {
                if (x !== 'logs' && x !== 'traces') {
                    usage(`--services takes logs and traces, not ${x}`);
                }
            }
            break;
        case '--partial-rejected':
            opts.plan.partial = opts.plan.partial || {};
            opts.plan.partial.rejected = Number(v);
            break;
        case '--partial-message':
            opts.plan.partial = opts.plan.partial || {};
            opts.plan.partial.message = v;
            break;
        }
    }
    if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
        usage('--port PORT is required (0 picks a free one)');
    }
    if (!opts.out) usage('--out FILE is required');
    if (!!opts.tlsCert !== !!opts.tlsKey) {
        usage('--tls-cert and --tls-key go together');
    }
    return opts;
}

function statusCode(s) {
    if (s === undefined || s === null) return 0;
    if (typeof s === 'number') return s;
    if (/^\d+$/.test(String(s))) return Number(s);
    const code = grpc.status[String(s).toUpperCase()];
    if (code === undefined) throw new Error(`unknown status ${s}`);
    return code;
}

const opts = parseArgs(process.argv.slice(2));
let lastControl = null;
let answeredWithStatus = 0;

function readControl() {
    if (!opts.control) return { text: '', plan: {} };
    let text;
    try {
        text = fs.readFileSync(opts.control, 'utf8');
    } catch (e) {
        return { text: '', plan: {} };
    }
    try {
        return { text, plan: text.trim() === '' ? {} : JSON.parse(text) };
    } catch (e) {
        process.stderr.write(`receiver: bad control file: ${e.message}\n`);
        return { text, plan: {} };
    }
}

function currentPlan() {
    const control = readControl();
    if (control.text !== lastControl) {
        lastControl = control.text;
        answeredWithStatus = 0;
    }
    return Object.assign({}, opts.plan, control.plan);
}

// Uint8Array -> hex, Long/bigint -> decimal string, recursively.
function plain(v) {
    if (v === null || v === undefined) return v;
    if (typeof v === 'bigint') {
        return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
    }
    if (v instanceof Uint8Array) return Buffer.from(v).toString('hex');
    if (Array.isArray(v)) return v.map(plain);
    if (typeof v === 'object') {
        if (typeof v.low === 'number' && typeof v.high === 'number'
            && typeof v.unsigned === 'boolean') {
            return v.toString();
        }
        const o = {};
        for (const k of Object.keys(v)) o[k] = plain(v[k]);
        return o;
    }
    return v;
}

function num(v) {
    if (typeof v === 'bigint') {
        return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
    }
    return v;
}

function profileJson(p) {
    const strings = p.stringTable.strings;
    const str = (i) => strings[Number(i)];
    const o = plain({
        sampleType: p.sampleType, sample: p.sample, mapping: p.mapping,
        location: p.location, function: p.function,
        dropFrames: p.dropFrames, keepFrames: p.keepFrames,
        timeNanos: p.timeNanos, durationNanos: p.durationNanos,
        periodType: p.periodType, period: p.period, comment: p.comment,
        defaultSampleType: p.defaultSampleType,
    });
    o.stringTable = strings;

    const functions = new Map(p.function.map((f) => [String(f.id), f]));
    const mappings = new Map(p.mapping.map((m) => [String(m.id), m]));
    const locations = new Map(p.location.map((l) => [String(l.id), l]));
    const mappingJson = (m) => m && {
        id: num(m.id), file: str(m.filename), build_id: str(m.buildId),
        memory_start: num(m.memoryStart), memory_limit: num(m.memoryLimit),
        file_offset: num(m.fileOffset),
    };
    const resolved = {
        sample_types: p.sampleType.map((t) => [str(t.type), str(t.unit)]),
        period_type: p.periodType
            ? [str(p.periodType.type), str(p.periodType.unit)] : null,
        period: num(p.period),
        mappings: p.mapping.map(mappingJson),
        samples: p.sample.map((s) => {
            const labels = {};
            for (const l of s.label) {
                labels[str(l.key)] = Number(l.str) !== 0 ? str(l.str)
                    : num(l.num);
            }
            const frames = [];
            for (const id of s.locationId) {
                const loc = locations.get(String(id));
                if (!loc) {
                    frames.push({ error: `no location ${id}` });
                    continue;
                }
                const m = mappings.get(String(loc.mappingId));
                const lines = loc.line.length ? loc.line : [null];
                // Inlined functions come first in pprof: one frame each.
                for (const line of lines) {
                    const f = line && functions.get(String(line.functionId));
                    frames.push({
                        address: num(loc.address),
                        function: f ? str(f.name) : null,
                        system_name: f ? str(f.systemName) : null,
                        file: f ? str(f.filename) : null,
                        line: line ? num(line.line) : null,
                        mapping: m ? str(m.filename) : null,
                        build_id: m ? str(m.buildId) : null,
                    });
                }
            }
            return { values: s.value.map(num), labels, frames };
        }),
    };
    return { profile: o, resolved };
}

function attributeValue(attrs, key) {
    for (const kv of attrs || []) {
        if (kv.key === key && kv.value) return kv.value.stringValue;
    }
    return undefined;
}

// Decodes the pprof bodies in place, on the plain JSON of the request.
function decodeProfiles(request) {
    for (const rl of request.resourceLogs || []) {
        for (const sl of rl.scopeLogs || []) {
            for (const lr of sl.logRecords || []) {
                const fmt = attributeValue(lr.attributes,
                    'profiling.data.format');
                if (fmt !== 'pprof-gzip-base64') continue;
                try {
                    const b64 = lr.body && lr.body.stringValue;
                    if (typeof b64 !== 'string') {
                        throw new Error('body is not a string');
                    }
                    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64)
                        || b64.length % 4 !== 0) {
                        throw new Error('body is not padded base64');
                    }
                    const raw = zlib.gunzipSync(Buffer.from(b64, 'base64'));
                    lr.pprof = profileJson(pprof.Profile.decode(raw));
                } catch (e) {
                    lr.pprof_error = String(e && e.message || e);
                }
            }
        }
    }
}

function metadataJson(md) {
    const o = {};
    for (const key of Object.keys(md.getMap())) {
        const values = md.get(key).map((v) => (Buffer.isBuffer(v)
            ? v.toString('base64') : v));
        o[key] = values.length === 1 ? values[0] : values;
    }
    return o;
}

const out = fs.openSync(opts.out, 'a');

function record(line) {
    fs.writeSync(out, JSON.stringify(line) + '\n');
}

function handler(svc) {
    return (call, callback) => {
        const plan = currentPlan();
        if (plan.exit) shutdown(0);
        let code = statusCode(plan.status);
        if (code !== 0 && plan.times !== undefined
            && answeredWithStatus >= plan.times) {
            code = 0;
        }
        if (code !== 0) answeredWithStatus++;
        const req = call.request;
        let message = code === 0 ? '' : (plan.message
            || `receiver answers ${code}`);
        if (req.decode_error !== undefined && code === 0) {
            code = grpc.status.INVALID_ARGUMENT;
            message = `cannot decode the request: ${req.decode_error}`;
        }
        const stall = Number(plan.stall_ms || 0);
        const line = {
            time_ms: Date.now(), signal: svc.signal, path: svc.path,
            peer: call.getPeer(), metadata: metadataJson(call.metadata),
            answer: { code, message, stall_ms: stall },
        };
        if (req.decode_error !== undefined) {
            line.decode_error = req.decode_error;
            line.request_bytes = req.length;
        } else if (req.message === undefined) {
            line.request_bytes = req.length;
        } else {
            line.request_bytes = req.length;
            line.request = plain(svc.request.toObject(req.message, {
                longs: String, enums: Number, defaults: false,
                arrays: false,
            }));
            if (svc.signal === 'logs') decodeProfiles(line.request);
        }
        record(line);

        const answer = () => {
            if (code !== 0) {
                callback({ code, details: message });
                return;
            }
            const resp = {};
            if (plan.partial) {
                resp.partialSuccess = svc.partial(plan.partial.rejected || 0,
                    plan.partial.message || '');
            }
            callback(null, resp);
        };
        if (stall < 0) return; // the client's deadline ends it
        if (stall === 0) {
            answer();
            return;
        }
        const timer = setTimeout(answer, stall);
        call.on('cancelled', () => clearTimeout(timer));
    };
}

const server = new grpc.Server({
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
});

for (const svc of SERVICES) {
    if (!opts.services.includes(svc.signal)) continue;
    server.addService({
        Export: {
            path: svc.path,
            requestStream: false,
            responseStream: false,
            // Never throw here: a request we cannot decode is recorded and
            // answered INVALID_ARGUMENT by the handler.
            requestDeserialize: (buf) => {
                if (!opts.decode) return { length: buf.length };
                try {
                    return { message: svc.request.decode(buf),
                        length: buf.length };
                } catch (e) {
                    return { decode_error: String(e && e.message || e),
                        length: buf.length };
                }
            },
            responseSerialize: (msg) => Buffer.from(
                svc.response.encode(msg).finish()),
            requestSerialize: (msg) => Buffer.from(
                svc.request.encode(msg).finish()),
            responseDeserialize: (buf) => svc.response.decode(buf),
        },
    }, { Export: handler(svc) });
}

function shutdown(rc) {
    server.forceShutdown();
    try { fs.closeSync(out); } catch (e) { /* already closed */ }
    process.exit(rc);
}

process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));

// A test killed outright cannot stop us: leave with the parent.
const parent = process.ppid;
setInterval(() => {
    if (process.ppid !== parent) shutdown(0);
}, 500).unref();

const creds = opts.tlsCert
    ? grpc.ServerCredentials.createSsl(null, [{
        cert_chain: fs.readFileSync(opts.tlsCert),
        private_key: fs.readFileSync(opts.tlsKey),
    }], false)
    : grpc.ServerCredentials.createInsecure();

const addr = opts.host.includes(':') ? `[${opts.host}]:${opts.port}`
    : `${opts.host}:${opts.port}`;
server.bindAsync(addr, creds, (err, port) => {
    if (err) {
        process.stderr.write(`receiver: cannot listen on ${addr}: `
            + `${err.message}\n`);
        process.exit(1);
    }
    process.stdout.write(`listening ${port}\n`);
    if (opts.control) {
        setInterval(() => {
            if (currentPlanExit()) shutdown(0);
        }, 100).unref();
    }
});

function currentPlanExit() {
    const control = readControl();
    return !!control.plan.exit;
}
