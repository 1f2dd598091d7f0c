// SPDX-License-Identifier: Apache-2.0
//
// The Cockpit page's connection to the service (cockpit/service.js), driven through a
// stand-in for cockpit.dbus() whose events and call results the test hands out in the
// order it wants: the states the page shows for each order the bus may choose.
// Usage: node cockpit-service-test.mjs SOURCE_DIR/cockpit/service.js   (TAP output)

import { readFileSync } from "node:fs";

const BUS = "org.freedesktop.DBus.Error.";

class FakeClient {
    constructor() {
        this.listeners = {};
        this.calls = [];
        this.watch = deferred();
    }

    addEventListener(type, func) {
        (this.listeners[type] = this.listeners[type] || []).push(func);
    }

    emit(type, ...args) {
        for (const func of this.listeners[type] || [])
            func({ type }, ...args);
    }

    proxy() {
        return { addEventListener() {} };
    }

    proxies() {
        const watch = this.watch;
        return { addEventListener() {}, wait: () => watch.promise };
    }

    subscribe() {
        return { remove() {} };
    }

    call(path, iface, method) {
        const call = deferred();
        this.calls.push({ method, call });
        return call.promise;
    }

    close() {}
}

function deferred() {
    const d = {};
    d.promise = new Promise((resolve, reject) => { d.resolve = resolve; d.reject = reject });
    return d;
}

const clients = [];
globalThis.cockpit = {
    gettext: s => s,
    message: e => (e && e.message) || String(e),
    dbus: () => {
        const client = new FakeClient();
        clients.push(client);
        return client;
    },
};

const source = readFileSync(process.argv[2], "utf8");
const { Shimwatch } = await import("data:text/javascript;base64," + Buffer.from(source).toString("base64"));

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

// a page connected to a client; returns the states it went through and the client
async function connect() {
    const states = [];
    const handlers = { state: s => states.push(s), reset() {}, added() {}, changed() {}, removed() {}, signal() {}, manager() {} };
    const service = new Shimwatch(handlers);
    return { service, states, client: clients[clients.length - 1] };
}

const cases = [];
function test(name, func) {
    cases.push({ name, func });
}

function expect(actual, expected, what) {
    if (actual !== expected)
        throw new Error(`${what}: ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
}

// The page opens as the service exits: the bus still named the exiting instance as the
// owner, the first read goes to it, the bus announces the name's release, then fails the
// read with NoReply. Nothing more comes: the page must say "not running", not "failed".
test("a read failing after the owner left: not running", async () => {
    const { states, client } = await connect();
    client.emit("owner", ":1.5");
    client.watch.resolve();
    await settle();
    expect(client.calls.length, 1, "calls");
    expect(client.calls[0].method, "GetAll", "the call");
    client.emit("owner", null);
    expect(states[states.length - 1], "not-running", "the state once the owner left");
    client.calls[0].call.reject({ name: BUS + "NoReply", message: "Message recipient disconnected from message bus without replying" });
    await settle();
    expect(states[states.length - 1], "not-running", "the state after the late failure");
});

// the other order: the read fails first, then the owner leaves
test("a read failing before the owner left: not running", async () => {
    const { states, client } = await connect();
    client.emit("owner", ":1.5");
    client.watch.resolve();
    await settle();
    client.calls[0].call.reject({ name: BUS + "NoReply", message: "Message recipient disconnected from message bus without replying" });
    await settle();
    client.emit("owner", null);
    expect(states[states.length - 1], "not-running", "the state");
});

// no owner at all: the bus says so with the error itself
test("no owner: not running", async () => {
    const { states, client } = await connect();
    client.watch.resolve();
    await settle();
    client.calls[0].call.reject({ name: BUS + "ServiceUnknown", message: "The name is not activatable" });
    await settle();
    expect(states[states.length - 1], "not-running", "the state");
});

// a running service that fails the read: that is a failure, and it stays one
test("a running service failing the read: failed", async () => {
    const { states, client } = await connect();
    client.emit("owner", ":1.7");
    client.watch.resolve();
    await settle();
    client.calls[0].call.reject({ name: "org.shimwatch.Shimwatch1.Error.Failed", message: "broken" });
    await settle();
    expect(states[states.length - 1], "failed", "the state");
});

// and a running service that answers: ready
test("a running service answering: ready", async () => {
    const { states, client } = await connect();
    client.emit("owner", ":1.8");
    client.watch.resolve();
    await settle();
    client.calls[0].call.resolve([{ Version: { t: "s", v: "1" } }]);
    await settle();
    expect(states[states.length - 1], "ready", "the state");
});

console.log(`1..${cases.length}`);
let failed = 0;
for (const [i, c] of cases.entries()) {
    try {
        await c.func();
        console.log(`ok ${i + 1} - ${c.name}`);
    } catch (e) {
        failed++;
        console.log(`not ok ${i + 1} - ${c.name}`);
        console.log(`# ${e.message}`);
    }
}
process.exit(failed ? 1 : 0);
