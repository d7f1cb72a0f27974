#!/usr/bin/env node
// End-to-end check of jaild's MCP front end with the official TypeScript MCP
// clients: @modelcontextprotocol/sdk (v1, the 2025 protocol) and
// @modelcontextprotocol/client (v2, by default with the 2025 handshake and in
// "auto" mode first probing with the 2026 server/discover request), over both
// transports:
//
//   stdio            spawns `JAILD mcp` (as root, real sandboxes)
//   Streamable HTTP  talks to a running `jaild serve` at --http URL
//
// Usage: node e2e.mjs --jaild /path/to/jaild [--http http://127.0.0.1:PORT/mcp]
//                     [--token TOKEN | --token-file FILE] [--only stdio|http]
//
// It prints one line per check and "N passed, M failed" at the end, and exits
// non-zero if any check failed. Without --http the HTTP checks are reported
// as skipped, not passed. Sandboxes are observed from the host with ps: each
// long-running command sleeps for a unique fractional number of seconds.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as StdioV1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as HttpV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { EmptyResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as HttpV2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioV2 } from '@modelcontextprotocol/client/stdio';

const { values: opts } = parseArgs({
    options: {
        jaild: { type: 'string' },
        http: { type: 'string' },
        token: { type: 'string' },
        'token-file': { type: 'string' },
        only: { type: 'string' },
    },
});
if (!opts.jaild && opts.only !== 'http') {
    console.error('usage: node e2e.mjs --jaild BIN [--http URL] [--token T | --token-file F] [--only stdio|http]');
    process.exit(2);
}
// A token file holds NAME:TOKEN lines (jaild serve's format); the first
// entry is used. A line without a colon is taken as a bare token.
function tokenFromFile(path) {
    const line = readFileSync(path, 'utf8').split('\n').map((l) => l.trim()).find((l) => l && !l.startsWith('#'));
    if (!line) throw new Error(`${path}: no token`);
    const i = line.indexOf(':');
    return i < 0 ? line : line.slice(i + 1);
}
const token = opts.token ?? (opts['token-file'] ? tokenFromFile(opts['token-file']) : undefined);

// Bounds on waiting for events (a sandbox to appear or vanish). They keep a
// broken server from hanging the run; they are not speed assertions.
const WAIT_MS = 20000;
const CALL_TIMEOUT_MS = 60000;

let passed = 0;
let failed = 0;
let skipped = 0;

async function check(name, fn) {
    try {
        const note = await fn();
        passed++;
        console.log(`PASS ${name}${note ? ` (${note})` : ''}`);
    } catch (err) {
        failed++;
        console.log(`FAIL ${name}: ${err?.stack ?? err}`.split('\n').slice(0, 4).join('\n    '));
    }
}

function skip(name, why) {
    skipped++;
    console.log(`SKIP ${name}: ${why}`);
}

function assert(cond, msg) {
    if (!cond) throw new Error(msg);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A unique sleep, so that ps on the host can tell whether its sandbox runs.
let markerSeq = 0;
function marker() {
    markerSeq++;
    return `sleep 300.${process.pid % 1000}${String(markerSeq).padStart(3, '0')}`;
}

function hostRuns(m) {
    const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
    return ps.split('\n').some((l) => l.trim() === m);
}

async function waitHost(m, present, what) {
    const deadline = Date.now() + WAIT_MS;
    while (Date.now() < deadline) {
        if (hostRuns(m) === present) return;
        await sleep(50);
    }
    throw new Error(`${what}: "${m}" still ${present ? 'absent' : 'running'} on the host after ${WAIT_MS} ms`);
}

function text(res) {
    return (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
}

// The two client generations differ in constructor and callTool signature;
// these adapters hide that.
const clients = {
    v1: {
        label: '@modelcontextprotocol/sdk@1.32.2',
        newClient: () => new ClientV1({ name: 'jaild-e2e', version: '1.0.0' }, { capabilities: {} }),
        stdio: (params) => {
            const t = new StdioV1(params);
            // The v1 client reports the negotiated version only to
            // transports that accept it; record it for the check.
            t.setProtocolVersion = (v) => { t.negotiated = v; };
            return t;
        },
        http: (url, init) => new HttpV1(url, { requestInit: init }),
        callTool: (c, params, options) => c.callTool(params, undefined, options),
        negotiated: (c, t) => t.negotiated ?? t.protocolVersion,
    },
    v2: {
        label: '@modelcontextprotocol/client@2.4.0',
        newClient: () => new ClientV2({ name: 'jaild-e2e', version: '1.0.0' }),
        stdio: (params) => new StdioV2(params),
        http: (url, init) => new HttpV2(url, { requestInit: init }),
        callTool: (c, params, options) => c.callTool(params, options),
        negotiated: (c) => c.getNegotiatedProtocolVersion?.(),
    },
    // The v2 client in "auto" mode first probes with the 2026 server/discover
    // request and picks the modern protocol if the server offers it, or
    // falls back to the initialize handshake if it answers with an error.
    v2auto: {
        label: '@modelcontextprotocol/client@2.4.0, versionNegotiation auto',
        newClient: () => new ClientV2({ name: 'jaild-e2e', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } }),
        stdio: (params) => new StdioV2(params),
        http: (url, init) => new HttpV2(url, { requestInit: init }),
        callTool: (c, params, options) => c.callTool(params, options),
        negotiated: (c) => `${c.getNegotiatedProtocolVersion?.()} (${c.getProtocolEra?.()} era)`,
    },
};

const transports = {
    stdio: (kind) => clients[kind].stdio({
        command: opts.jaild,
        args: ['mcp'],
        // The default environment of the SDK's stdio transport is a small
        // safe set; pass ours so JAILD_* settings of the caller apply.
        env: { ...process.env },
        stderr: 'inherit',
    }),
    http: (kind) => clients[kind].http(new URL(opts.http), {
        headers: token ? { Authorization: `Bearer ${token}` } : {},
    }),
};

async function connect(kind, tname) {
    const client = clients[kind].newClient();
    const transport = transports[tname](kind);
    await client.connect(transport);
    return { client, transport, call: (params, o) => clients[kind].callTool(client, params, { timeout: CALL_TIMEOUT_MS, ...o }) };
}

async function suite(kind, tname) {
    const p = `${tname}/${kind}`;
    let s;
    await check(`${p} initialize (${clients[kind].label})`, async () => {
        s = await connect(kind, tname);
        const info = s.client.getServerVersion();
        assert(info?.name === 'jaild', `serverInfo ${JSON.stringify(info)}`);
        const v = clients[kind].negotiated(s.client, s.transport);
        assert(v, 'no negotiated protocol version');
        return `protocol ${v}, server ${info.name} ${info.version}`;
    });
    if (!s) {
        skip(`${p} remaining checks`, 'initialize failed');
        return;
    }
    try {
        await checks(p, kind, tname, s);
    } finally {
        await s.client.close().catch(() => {});
    }
}

async function checks(p, kind, tname, s) {
    await check(`${p} tools/list`, async () => {
        const { tools } = await s.client.listTools();
        const names = tools.map((t) => t.name).sort();
        // With sessions (jaild's default) the background task tools too.
        assert(JSON.stringify(names) === '["bash","execute","kill_task","list_tasks","task_output"]', `tools ${names}`);
        for (const t of tools.filter((t) => t.name === "bash" || t.name === "execute")) {
            assert(t.description?.length > 50, `${t.name}: short description`);
            assert(t.outputSchema?.properties?.exit_code, `${t.name}: no output schema`);
            for (const [prop, sch] of Object.entries(t.inputSchema.properties)) {
                assert(sch.description, `${t.name}.${prop}: no description`);
            }
        }
        return names.join(', ');
    });

    await check(`${p} successful call`, async () => {
        const res = await s.call({ name: 'bash', arguments: { command: 'echo hello; echo warn >&2; id -u', description: 'e2e' } });
        const o = res.structuredContent;
        assert(!res.isError, `isError: ${text(res)}`);
        assert(o.stdout === 'hello\n1000\n' && o.stderr === 'warn\n' && o.exit_code === 0, `output ${JSON.stringify(o)}`);
        assert(text(res).includes('hello'), `text ${text(res)}`);
        const ex = await s.call({ name: 'execute', arguments: { command: 'cat', stdin: 'piped in' } });
        assert(!ex.isError && ex.structuredContent.stdout === 'piped in', `execute: ${text(ex)}`);
        return `duration ${o.duration_ms} ms`;
    });

    await check(`${p} failing call`, async () => {
        const res = await s.call({ name: 'bash', arguments: { command: 'echo partial; echo bad >&2; exit 3' } });
        const o = res.structuredContent;
        assert(res.isError === true, 'isError not set');
        assert(o?.exit_code === 3 && o.stdout === 'partial\n' && o.stderr === 'bad\n', `output ${JSON.stringify(o)}`);
        const bad = await s.call({ name: 'bash', arguments: { command: 'true', timeout: -1 } });
        assert(bad.isError === true && /timeout/.test(text(bad)), `bad arguments: ${JSON.stringify(bad)}`);
        let err;
        await s.call({ name: 'no_such_tool', arguments: {} }).catch((e) => { err = e; });
        assert(err, 'unknown tool did not fail');
        return 'exit 3 kept output; bad args a tool error; unknown tool a protocol error';
    });

    if (kind === 'v1') {
        await check(`${p} unknown method`, async () => {
            let err;
            await s.client.request({ method: 'jaild/no-such-method', params: {} }, EmptyResultSchema).catch((e) => { err = e; });
            assert(err?.code === -32601, `got ${err?.code} ${err?.message}`);
            return `JSON-RPC ${err.code}`;
        });
    }

    await check(`${p} timeout`, async () => {
        const res = await s.call({ name: 'bash', arguments: { command: 'echo started; sleep 30', timeout: 1500 } });
        const o = res.structuredContent;
        assert(res.isError === true, 'isError not set');
        assert(o?.timed_out === true && o.stdout === 'started\n' && o.timeout_ms === 1500, `output ${JSON.stringify(o)}`);
        assert(/TIMED OUT/.test(text(res)), `text ${text(res)}`);
        return 'partial output kept';
    });

    await check(`${p} progress streams output`, async () => {
        const notes = [];
        const res = await s.call(
            { name: 'bash', arguments: { command: 'echo ready; sleep 1; echo done; echo oops >&2' } },
            { onprogress: (n) => notes.push(n), resetTimeoutOnProgress: true },
        );
        assert(!res.isError, text(res));
        assert(res.structuredContent.stdout === 'ready\ndone\n' && res.structuredContent.stderr === 'oops\n', `result ${text(res)}`);
        const msgs = notes.map((n) => n.message ?? '');
        // "ready" arrived in a notification of its own, without "done",
        // which the command wrote a second later: it was streamed while the
        // command ran (a server that sent output only at the end would have
        // sent both in one message). The tail is not checked: the TypeScript
        // clients handle notifications in a microtask, so the ones that
        // arrive together with the result are dropped; the result has them.
        const first = msgs.find((m) => m.includes('ready'));
        assert(first !== undefined, `no notification carried "ready": ${JSON.stringify(msgs)}`);
        assert(!first.includes('done'), `first message ${JSON.stringify(first)} was not streamed early`);
        return `${notes.length} notifications`;
    });

    await check(`${p} cancelled call`, async () => {
        const m = marker();
        const ac = new AbortController();
        const pending = s.call({ name: 'bash', arguments: { command: m } }, { signal: ac.signal }).then(
            () => { throw new Error('call completed'); },
            (e) => e,
        );
        await waitHost(m, true, 'sandbox start');
        ac.abort();
        const err = await pending;
        assert(err, 'no error');
        await waitHost(m, false, 'sandbox kill after cancellation');
        const res = await s.call({ name: 'bash', arguments: { command: 'echo after' } });
        assert(!res.isError && res.structuredContent.stdout === 'after\n', 'session unusable after cancellation');
        return 'sandbox killed, session still usable';
    });

    await check(`${p} 10 concurrent calls`, async () => {
        const results = await Promise.all(Array.from({ length: 10 }, (_, i) =>
            s.call({ name: 'execute', arguments: { command: 'sh', args: ['-c', `sleep 0.5; echo ${i}`] } })));
        results.forEach((res, i) => {
            assert(!res.isError && res.structuredContent.stdout === `${i}\n`, `call ${i}: ${text(res)}`);
        });
        return 'all returned their own output';
    });

    await check(`${p} disconnect mid-call, then a new client`, async () => {
        const m = marker();
        const pending = s.call({ name: 'bash', arguments: { command: m } }).catch((e) => e);
        await waitHost(m, true, 'sandbox start');
        await s.transport.close();
        await pending;
        await waitHost(m, false, 'sandbox kill after disconnect');
        const s2 = await connect(kind, tname);
        try {
            const res = await s2.call({ name: 'bash', arguments: { command: 'echo again' } });
            assert(!res.isError && res.structuredContent.stdout === 'again\n', `new client: ${text(res)}`);
        } finally {
            await s2.client.close().catch(() => {});
        }
        return 'sandbox killed, new client served';
    });
}

for (const tname of ['stdio', 'http']) {
    if (opts.only && opts.only !== tname) continue;
    for (const kind of Object.keys(clients)) {
        if (tname === 'http' && !opts.http) {
            skip(`${tname}/${kind}`, 'no --http URL given');
            continue;
        }
        await suite(kind, tname);
    }
}

console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 ? 1 : 0);
