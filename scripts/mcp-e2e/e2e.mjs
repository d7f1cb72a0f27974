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
//                     [--token TOKEN | --token-file FILE] [--only stdio|http|lifecycle]
//                     [--sync] [--lifecycle http://127.0.0.1:PORT/mcp]
//
// Besides the protocol checks, each client/transport pair plays an agent's
// conversation in one MCP session (see agent below): files, cd, export, a
// build with cc, background tasks, a loopback server, a fork bomb. With
// --sync, the host side is asked to confirm what only it can see: the
// script prints "SYNC present MARKER" before closing the MCP session and
// "SYNC gone MARKER" after, and reads one line from stdin for each, "ok" or
// anything else as the reason of a failure (server/mcp_e2e_test.go answers:
// the jaild session's workspace, found by the file MARKER in it, exists and
// then is removed). Without --sync those two checks are reported skipped.
//
// With --lifecycle (and --sync), the life of MCP sessions' workspaces is
// checked against a second `jaild serve` started with
// --max-sessions-per-caller 1 --max-mcp-sessions-per-caller 2
// --mcp-session-idle 2s --session-max-lifetime 30s: clients that close
// without DELETE, the HTTP session quota, the refusal when every workspace is
// in use, DELETE, and a workspace that expires under a live MCP session. The
// script asks "SYNC count N": the host answers once that daemon's workspaces
// directory holds N workspaces and its jaild_sessions gauge reads N.
//
// It prints one line per check and "N passed, M failed" at the end, and exits
// non-zero if any check failed. Without --http the HTTP checks are reported
// as skipped, not passed. Sandboxes are observed from the host with ps: each
// long-running command sleeps for a unique fractional number of seconds.

import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
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
        sync: { type: 'boolean' },
        lifecycle: { type: 'string' },
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

    await check(`${p} the output cap counts whole characters`, async () => {
        // 60000 two-byte characters, over the 30000-character cap.
        const res = await s.call({ name: 'bash', arguments: { command: "yes é | head -n 60000 | tr -d '\\n'" } });
        const o = res.structuredContent;
        assert(!o.stdout.includes('\uFFFD'), 'a character was cut in two');
        const n = [...o.stdout].length;
        assert(o.stdout_truncated && n <= 30000 && n > 29900, `kept ${n} characters, truncated ${o.stdout_truncated}`);
        return `${n} characters kept`;
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

// The host side's answers to --sync questions, one line each.
let stdinLines;
async function askHost(question) {
    stdinLines ??= createInterface({ input: process.stdin })[Symbol.asyncIterator]();
    console.log(`SYNC ${question}`);
    const { value, done } = await stdinLines.next();
    if (done) throw new Error(`no answer to "${question}": stdin closed`);
    if (value.trim() !== 'ok') throw new Error(`host: ${value}`);
}

// agent plays one agent conversation in a fresh MCP session, the way a
// coding agent uses the bash tool: every call is a fresh sandbox, but the
// session's /work, working directory, exported variables, background tasks
// and loopback network carry over. Every step's output is checked.
async function agent(kind, tname, port) {
    const p = `${tname}/${kind} agent`;
    // A name no other run has: the project directory, and the file the host
    // looks for to find this session's workspace.
    const mark = `e2e-${process.pid}-${kind}-${tname}-${Date.now()}`;
    let s;
    await check(`${p}: connect`, async () => { s = await connect(kind, tname); });
    if (!s) {
        skip(`${p} remaining steps`, 'connect failed');
        return;
    }
    let closed = false;
    const close = async () => {
        if (closed) return;
        closed = true;
        // A Streamable HTTP client ends its session with DELETE; over stdio
        // closing stdin ends `jaild mcp`.
        if (tname === 'http') await s.transport.terminateSession?.();
        await s.client.close();
    };
    const bash = async (command, extra = {}) => {
        const res = await s.call({ name: 'bash', arguments: { command, ...extra } });
        return { res, o: res.structuredContent ?? {}, t: text(res) };
    };
    const tool = async (name, args) => {
        const res = await s.call({ name, arguments: args });
        assert(!res.isError, `${name}: ${text(res)}`);
        return res.structuredContent;
    };
    const ok = (r, what) => assert(!r.res.isError && r.o.exit_code === 0, `${what}: ${r.t} ${JSON.stringify(r.o)}`);
    try {
        await check(`${p}: write a file, cd, export`, async () => {
            const r = await bash(`mkdir -p /work/${mark}/src && echo kept > /work/${mark}/notes.txt && ` +
                `cd /work/${mark}/src && export AGENT_VAR=exported-${kind} && echo done`);
            ok(r, 'first call');
            assert(r.o.stdout === 'done\n', `stdout ${JSON.stringify(r.o.stdout)}`);
        });
        await check(`${p}: the next call sees the file, the directory and the variable`, async () => {
            const r = await bash('pwd; cat ../notes.txt; echo "$AGENT_VAR"');
            ok(r, 'second call');
            const want = `/work/${mark}/src\nkept\nexported-${kind}\n`;
            assert(r.o.stdout === want, `stdout ${JSON.stringify(r.o.stdout)}, want ${JSON.stringify(want)}`);
        });
        await check(`${p}: build with cc and run the result`, async () => {
            const src = '#include <stdio.h>\n#include <stdlib.h>\n' +
                'int main(void) { const char *v = getenv("AGENT_VAR"); printf("built: %s\\n", v ? v : "(unset)"); return 7; }\n';
            const w = await bash(`cat > hello.c <<'EOF'\n${src}EOF\ncc -O2 -o hello hello.c && ls hello`);
            ok(w, 'cc');
            assert(w.o.stdout === 'hello\n', `cc: ${JSON.stringify(w.o)}`);
            const r = await bash('./hello');
            assert(r.res.isError === true && r.o.exit_code === 7, `./hello: ${JSON.stringify(r.o)}`);
            assert(r.o.stdout === `built: exported-${kind}\n`, `./hello stdout ${JSON.stringify(r.o.stdout)}`);
            return 'exit 7 as written, with the exported variable';
        });
        let loop;
        await check(`${p}: background job, task_output block=false then block=true`, async () => {
            // The job waits for a file the agent makes later, so that its
            // state at each poll does not depend on timing.
            const r = await bash(`echo started; while [ ! -e /work/${mark}/go ]; do sleep 0.05; done; echo finished; exit 4`,
                { run_in_background: true, description: 'wait for the go file' });
            assert(!r.res.isError && r.o.task_id, `start: ${r.t}`);
            assert(r.t.includes(`task_output {"task_id":"${r.o.task_id}"}`), `the text does not say how to read the task: ${r.t}`);
            loop = r.o.task_id;
            let o;
            const deadline = Date.now() + WAIT_MS;
            do {
                o = await tool('task_output', { task_id: loop, block: false });
                assert(o.state === 'running', `block=false: ${JSON.stringify(o)}`);
                if (o.stdout === 'started\n') break;
                await sleep(50);
            } while (Date.now() < deadline);
            assert(o.stdout === 'started\n', `no "started" from the running task: ${JSON.stringify(o)}`);
            // block=true returns at its timeout while the task still runs.
            o = await tool('task_output', { task_id: loop, block: true, timeout: 300 });
            assert(o.state === 'running' && o.exit_code === undefined, `block with a short timeout: ${JSON.stringify(o)}`);
            ok(await bash(`touch /work/${mark}/go`), 'touch');
            o = await tool('task_output', { task_id: loop, block: true, timeout: 30000 });
            assert(o.state === 'exited' && o.exit_code === 4 && o.stdout === 'started\nfinished\n',
                `block until the end: ${JSON.stringify(o)}`);
            return `task ${loop}`;
        });
        let server;
        await check(`${p}: a background server reached over loopback from a later call`, async () => {
            const r = await bash(`exec python3 -m http.server ${port} --bind 127.0.0.1`, { run_in_background: true });
            assert(!r.res.isError && r.o.task_id, `start: ${r.t}`);
            server = r.o.task_id;
            // It serves the task's working directory, the session's.
            const c = await bash(`for i in $(seq 200); do curl -sf http://127.0.0.1:${port}/hello.c && exit 0; sleep 0.05; done; exit 1`);
            ok(c, 'curl');
            assert(c.o.stdout.includes('int main(void)'), `curl got ${JSON.stringify(c.o.stdout)}`);
        });
        await check(`${p}: list_tasks`, async () => {
            const o = await tool('list_tasks', {});
            const byID = Object.fromEntries(o.tasks.map((t) => [t.task_id, t]));
            assert(o.tasks.length === 2, `tasks ${JSON.stringify(o.tasks)}`);
            assert(byID[loop]?.state === 'exited' && byID[loop].exit_code === 4, `the loop: ${JSON.stringify(byID[loop])}`);
            assert(byID[loop].description === 'wait for the go file', `the loop's description: ${JSON.stringify(byID[loop])}`);
            assert(byID[server]?.state === 'running', `the server: ${JSON.stringify(byID[server])}`);
        });
        await check(`${p}: kill_task, and the server is gone`, async () => {
            const o = await tool('kill_task', { task_id: server });
            assert(o.state === 'exited' && o.verdict?.canceled === true && o.error === 'killed', `kill_task: ${JSON.stringify(o)}`);
            const t = await tool('task_output', { task_id: server, block: false });
            assert(t.state === 'exited', `task_output after kill: ${JSON.stringify(t)}`);
            const c = await bash(`curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:${port}/; echo " exit=$?"`);
            assert(c.o.stdout === '000 exit=7\n', `curl after the kill: ${JSON.stringify(c.o)}`);
            return 'curl: connection refused';
        });
        await check(`${p}: a fork bomb, then the session still has its files`, async () => {
            // The shell stays (sleep) while the bomb fills the call's pids
            // limit, until the timeout kills the sandbox. How far the bomb
            // got by then depends on the host's load: the verdict says
            // timed out, and the pids limit hit if it was reached.
            const b = await bash(':(){ :|:& };:; sleep 20', { timeout: 4000 });
            assert(b.res.isError === true && b.o.timed_out === true, `verdict ${JSON.stringify(b.o)}`);
            const r = await bash('pwd; cat ../notes.txt; echo "$AGENT_VAR"; ./hello; echo "hello exit $?"');
            ok(r, 'after the fork bomb');
            const want = `/work/${mark}/src\nkept\nexported-${kind}\nbuilt: exported-${kind}\nhello exit 7\n`;
            assert(r.o.stdout === want, `stdout ${JSON.stringify(r.o.stdout)}, want ${JSON.stringify(want)}`);
            return `timed_out ${b.o.timed_out}, pids_limit_hit ${b.o.pids_limit_hit}`;
        });
        if (!opts.sync) {
            skip(`${p}: closing the MCP session removes the jaild session`, 'no --sync: the host cannot be asked');
            return;
        }
        await check(`${p}: the host sees the session's workspace`, () => askHost(`present ${mark}`));
        await check(`${p}: closing the MCP session removes the jaild session`, async () => {
            await close();
            await askHost(`gone ${mark}`);
        });
    } finally {
        await close().catch(() => {});
    }
}


// rawStdio speaks JSON-RPC to `jaild mcp --stdio` line by line, to send what
// no SDK client sends: lines that are no JSON-RPC message, and a
// cancellation whose call must then get no response.
async function rawStdio() {
    const p = 'stdio/raw';
    const child = spawn(opts.jaild, ['mcp', '--stdio'], { env: { ...process.env }, stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    const got = [];
    let wake = () => {};
    createInterface({ input: child.stdout }).on('line', (l) => {
        got.push(JSON.parse(l));
        wake();
    });
    const send = (m) => child.stdin.write((typeof m === 'string' ? m : JSON.stringify(m)) + '\n');
    // next waits for the next response (not a notification) and returns it.
    let seen = 0;
    const next = async () => {
        const deadline = Date.now() + CALL_TIMEOUT_MS;
        for (;;) {
            while (seen < got.length) {
                const m = got[seen++];
                if (!('method' in m)) return m;
            }
            if (Date.now() > deadline) throw new Error('no response');
            await new Promise((r) => { wake = r; setTimeout(r, 100); });
        }
    };
    try {
        await check(`${p}: jaild mcp --stdio initializes`, async () => {
            send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
            const r = await next();
            assert(r.id === 1 && r.result?.serverInfo?.name === 'jaild', `initialize: ${JSON.stringify(r)}`);
            send({ jsonrpc: '2.0', method: 'notifications/initialized' });
        });
        await check(`${p}: bad lines get -32700 and -32600, and the call in flight goes on`, async () => {
            send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'bash', arguments: { command: 'sleep 1; echo survived' } } });
            send('{"jsonrpc":"2.0","id":3,"method":');
            let r = await next();
            assert(r.error?.code === -32700 && r.id === null, `not JSON: ${JSON.stringify(r)}`);
            send('{"foo":1}');
            r = await next();
            assert(r.error?.code === -32600 && r.id === null, `not a message: ${JSON.stringify(r)}`);
            r = await next();
            assert(r.id === 2 && r.result?.structuredContent?.stdout === 'survived\n', `the call in flight: ${JSON.stringify(r)}`);
            return 'parse error, invalid request, call completed';
        });
        await check(`${p}: a cancelled call gets no response`, async () => {
            const m = marker();
            send({ jsonrpc: '2.0', id: 'c', method: 'tools/call', params: { name: 'bash', arguments: { command: m } } });
            await waitHost(m, true, 'sandbox start');
            send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'c', reason: 'e2e' } });
            await waitHost(m, false, 'sandbox kill after cancellation');
            send({ jsonrpc: '2.0', id: 'after', method: 'tools/call', params: { name: 'bash', arguments: { command: 'echo after' } } });
            const r = await next();
            assert(r.id === 'after', `got ${JSON.stringify(r)}, want only the response to "after"`);
            return 'sandbox killed, no response';
        });
    } finally {
        child.stdin.end();
    }
    await check(`${p}: exits 0 when stdin closes`, async () => {
        const { code, signal } = await exited;
        assert(code === 0, `exit ${code} ${signal ?? ''}`);
    });
}

// rawHTTP posts what the SDK clients never send without a session.
async function rawHTTP() {
    const p = 'http/raw';
    await check(`${p}: tools/list without Mcp-Session-Id is 400`, async () => {
        const res = await fetch(opts.http, {
            method: 'POST',
            headers: {
                'Content-Type': 'application/json',
                Accept: 'application/json, text/event-stream',
                ...(token ? { Authorization: `Bearer ${token}` } : {}),
            },
            body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
        });
        const body = await res.text();
        assert(res.status === 400, `status ${res.status}: ${body}`);
        assert(!res.headers.get('mcp-session-id'), 'a session was started');
        return body;
    });
}

// lifecycle checks the life of MCP sessions' workspaces against the daemon at
// --lifecycle (see the header for its flags), with the v1 client.
async function lifecycle() {
    const p = 'http/lifecycle';
    const auth = token ? { Authorization: `Bearer ${token}` } : {};
    const base = opts.lifecycle.replace(/\/mcp$/, '');
    const open = async () => {
        const client = clients.v1.newClient();
        const transport = clients.v1.http(new URL(opts.lifecycle), { headers: auth });
        await client.connect(transport);
        return { client, transport, call: (params) => clients.v1.callTool(client, params, { timeout: CALL_TIMEOUT_MS }) };
    };
    const end = async (s) => {
        await s.transport.terminateSession().catch(() => {});
        await s.client.close().catch(() => {});
    };
    await check(`${p}: 5 clients that close without DELETE each get a workspace`, async () => {
        for (let i = 1; i <= 5; i++) {
            const s = await open();
            const res = await s.call({ name: 'bash', arguments: { command: `echo ${i} > /work/n; cat /work/n` } });
            // client.close() sends no DELETE, like the Inspector CLI's.
            await s.client.close();
            assert(!res.isError && res.structuredContent?.stdout === `${i}\n`, `client ${i}: ${text(res)}`);
        }
    });
    await check(`${p}: their workspaces do not take the caller's HTTP sessions`, async () => {
        const res = await fetch(`${base}/sessions`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: '{}' });
        const body = await res.json();
        assert(res.status === 201, `POST /sessions: ${res.status} ${JSON.stringify(body)}`);
        const del = await fetch(`${base}/sessions/${body.id}`, { method: 'DELETE', headers: auth });
        assert(del.status === 204, `DELETE /sessions/${body.id}: ${del.status}`);
    });
    await check(`${p}: the workspaces of clients gone without DELETE are removed after --mcp-session-idle`, () => askHost('count 0'));
    await check(`${p}: with every MCP workspace in use a new one is refused, saying why; DELETE frees one`, async () => {
        const [a, b, c] = [await open(), await open(), await open()];
        try {
            for (const s of [a, b]) {
                const r = await s.call({ name: 'bash', arguments: { command: 'sleep 120', run_in_background: true } });
                assert(!r.isError, `background task: ${text(r)}`);
            }
            const r = await c.call({ name: 'bash', arguments: { command: 'true' } });
            const t = text(r);
            assert(r.isError && /holds its maximum of 2 MCP workspaces/.test(t) && /close MCP sessions/.test(t), `refusal: ${t}`);
            await askHost('count 2');
            await end(a);
            await askHost('count 1');
            const r2 = await c.call({ name: 'bash', arguments: { command: 'echo placed' } });
            assert(!r2.isError && r2.structuredContent?.stdout === 'placed\n', `after a DELETE: ${text(r2)}`);
        } finally {
            await end(b);
            await end(c);
        }
        await askHost('count 0');
        return 'refused while both ran tasks; served after a DELETE';
    });
    await check(`${p}: a workspace that expired under a live MCP session says so once, then a fresh one`, async () => {
        const s = await open();
        try {
            let r = await s.call({ name: 'bash', arguments: { command: 'echo kept > /work/f' } });
            assert(!r.isError, `write: ${text(r)}`);
            // The client stays connected; --session-max-lifetime ends it.
            await askHost('count 1');
            await askHost('count 0');
            r = await s.call({ name: 'bash', arguments: { command: 'cat /work/f' } });
            const t = text(r);
            assert(r.isError && /workspace is gone \(it expired at its maximum lifetime/.test(t) && /files in \/work/.test(t) && !/command not found/.test(t),
                `after the expiry: ${t}`);
            r = await s.call({ name: 'bash', arguments: { command: 'ls -A /work' } });
            assert(!r.isError && r.structuredContent?.stdout === '', `the next call: ${text(r)}`);
            return t.split(':')[0];
        } finally {
            await end(s);
        }
    });
    await check(`${p}: nothing left`, () => askHost('count 0'));
}

let port = 0;
if (opts.lifecycle && (!opts.only || opts.only === 'lifecycle')) {
    if (opts.sync) await lifecycle();
    else skip('http/lifecycle', 'no --sync: the host cannot be asked');
}
for (const tname of ['stdio', 'http']) {
    if (opts.only && opts.only !== tname) continue;
    if (tname === 'stdio') await rawStdio();
    if (tname === 'http' && opts.http) await rawHTTP();
    for (const kind of Object.keys(clients)) {
        if (tname === 'http' && !opts.http) {
            skip(`${tname}/${kind}`, 'no --http URL given');
            continue;
        }
        await suite(kind, tname);
        await agent(kind, tname, 8130 + port++);
    }
}

console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 ? 1 : 0);
