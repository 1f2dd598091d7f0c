/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection to shimwatchd on the system bus: the Manager and one proxy per Shim
 * object (kept current by ObjectManager and PropertiesChanged, no polling), the lifecycle
 * signals, and calls whose errors come back with the service's own message.
 */

const _ = cockpit.gettext;

export const BUS_NAME = "org.shimwatch.Shimwatch1";
export const MANAGER_PATH = "/org/shimwatch/Shimwatch1";
export const MANAGER = BUS_NAME + ".Manager";
export const SHIM = BUS_NAME + ".Shim";
const ERROR = BUS_NAME + ".Error.";

const ERROR_TITLES = {
    InvalidArgument: _("Invalid argument"),
    NotFound: _("Not found"),
    AlreadyExists: _("Already exists"),
    BadState: _("Not possible in the task's current state"),
    NotAuthorized: _("Not authorized"),
    NotAuthorizedCanObtain: _("Authentication required"),
    ShimFailed: _("The shim failed"),
    Busy: _("The service is busy, try again later"),
    Failed: _("Failed"),
};

/* { name, title, message } of an error of a call, for people: the service's own message,
 * under a title that says what kind of error it is (never a stack trace) */
export function describeError(error) {
    const name = (error && error.name) || "";
    let title = _("Failed");
    if (name.startsWith(ERROR))
        title = ERROR_TITLES[name.slice(ERROR.length)] || title;
    else if (name === "org.freedesktop.DBus.Error.ServiceUnknown" ||
             name === "org.freedesktop.DBus.Error.NameHasNoOwner")
        title = _("The shimwatch service is not running");
    else if (name === "org.freedesktop.DBus.Error.AccessDenied" || (error && error.problem === "access-denied"))
        title = _("Not authorized");
    else if (name === "org.freedesktop.DBus.Error.NoReply")
        title = _("The service did not answer in time");
    else if (error && error.title)
        title = error.title;
    let message = error ? cockpit.message(error) : "";
    if (!message || message === name)
        message = title;
    return { name, short: name.startsWith(ERROR) ? name.slice(ERROR.length) : name, title, message };
}

export function isNotAuthorized(error) {
    const name = (error && error.name) || "";
    return name === ERROR + "NotAuthorized" || name === ERROR + "NotAuthorizedCanObtain" ||
           name === "org.freedesktop.DBus.Error.AccessDenied" || (error && error.problem === "access-denied");
}

export function variant(type, value) {
    return { t: type, v: value };
}

/* a{sv} from the service: { key: value } */
export function unwrap(dict) {
    const result = {};
    for (const [key, value] of Object.entries(dict || {}))
        result[key] = (value && typeof value === "object" && "v" in value) ? value.v : value;
    return result;
}

/*
 * handlers: state(state, error) with state "connecting", "not-running", "not-authorized",
 * "ready" or "failed"; added(proxy), changed(proxy), removed(proxy); signal(name, args);
 * manager(proxy) when the Manager's properties change.
 */
export class Shimwatch {
    constructor(handlers) {
        this.handlers = handlers;
        this.client = null;
        this.connect();
    }

    connect() {
        const handlers = this.handlers;
        const client = cockpit.dbus(BUS_NAME, { bus: "system", superuser: "try" });
        this.client = client;
        this.owner = undefined;
        handlers.state("connecting");

        client.addEventListener("owner", (event, owner) => {
            if (client !== this.client)
                return;
            const before = this.owner;
            this.owner = owner;
            if (!owner) {
                handlers.state("not-running");
            } else if (before === null || (before && before !== owner)) {
                /* the service (re)started: read everything again from the new instance */
                this.reconnect();
            }
        });
        client.addEventListener("close", (event, options) => {
            if (client !== this.client)
                return;
            if (options.problem === "access-denied" || options.problem === "not-authorized")
                handlers.state("not-authorized", options);
            else if (options.problem)
                handlers.state("failed", options);
        });

        this.manager = client.proxy(MANAGER, MANAGER_PATH, { watch: false });
        this.manager.addEventListener("changed", () => handlers.manager(this.manager));

        this.subscription = client.subscribe({ interface: MANAGER, path: MANAGER_PATH },
                                             (path, iface, signal, args) => {
                                                 if (client === this.client)
                                                     handlers.signal(signal, args);
                                             });

        this.shims = client.proxies(SHIM, MANAGER_PATH);
        this.shims.addEventListener("added", (event, proxy) => handlers.added(proxy));
        this.shims.addEventListener("changed", (event, proxy) => handlers.changed(proxy));
        this.shims.addEventListener("removed", (event, proxy) => handlers.removed(proxy));

        /* reading everything once: GetManagedObjects through the bridge's watch */
        this.shims.wait()
                .then(() => {
                    if (client !== this.client)
                        return;
                    /* the Manager answers: the service runs (GetHistory tells us more) */
                    return client.call(MANAGER_PATH, "org.freedesktop.DBus.Properties", "GetAll", [MANAGER], { type: "s" })
                            .then(([props]) => {
                                if (client !== this.client)
                                    return;
                                this.owner = this.owner || "?";
                                handlers.manager(unwrap(props));
                                handlers.state("ready");
                            });
                })
                .catch(error => {
                    if (client !== this.client)
                        return;
                    const name = (error && error.name) || "";
                    /* The bus told us the name has no owner (this.owner === null): whatever
                     * failed, the service is not running. A call on its way to an instance
                     * that is exiting fails after the bus announced the name's release, with
                     * NoReply ("recipient disconnected"): that says nothing more, and must not
                     * turn "not running" into "failed" for good (no owner event follows). */
                    if (name === "org.freedesktop.DBus.Error.ServiceUnknown" ||
                        name === "org.freedesktop.DBus.Error.NameHasNoOwner" ||
                        this.owner === null) {
                        this.owner = null;
                        handlers.state("not-running");
                    } else if (isNotAuthorized(error)) {
                        handlers.state("not-authorized", error);
                    } else {
                        handlers.state("failed", error);
                    }
                });
    }

    reconnect() {
        const old = this.client;
        this.client = null;
        if (this.subscription)
            this.subscription.remove();
        if (old)
            old.close();
        this.handlers.reset();
        this.connect();
    }

    call(path, iface, method, args, type) {
        return this.client.call(path, iface, method, args || [], type ? { type } : undefined);
    }

    shimCall(path, method, args, type) {
        return this.call(path, SHIM, method, args, type);
    }

    managerCall(method, args, type) {
        return this.call(MANAGER_PATH, MANAGER, method, args, type);
    }

    createTask(namespace, id, bundle, options) {
        return this.managerCall("CreateTask", [namespace, id, bundle, options], "sssa{sv}")
                .then(([path]) => path);
    }

    reap(namespace, id) {
        return this.managerCall("Reap", [namespace, id, {}], "ssa{sv}").then(([status]) => status);
    }

    history(limit) {
        return this.managerCall("GetHistory", [{ limit: variant("u", limit) }], "a{sv}")
                .then(([events]) => events.map(unwrap));
    }
}
