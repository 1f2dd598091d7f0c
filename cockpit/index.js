/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The page: connects to shimwatchd on the system bus and shows one of its states:
 * connecting, service not running, not authorized, no tasks, or the task table with the
 * selected task's detail, and the event feed beside them.
 */

import { h, replaceChildren } from "./dom.js";
import { Shimwatch } from "./service.js";
import { TaskTable } from "./task-table.js";
import { TaskDetail } from "./task-detail.js";
import { EventFeed, SIGNAL_EVENTS, FEED_SIZE } from "./event-feed.js";
import { openCreateDialog } from "./create-dialog.js";
import { errorAlert } from "./dialogs.js";

const _ = cockpit.gettext;

const START_COMMAND = "systemctl start shimwatch.service";

class App {
    constructor(root) {
        document.title = _("Container shims");
        this.root = root;
        this.state = "connecting";
        this.proxies = new Map();
        this.table = new TaskTable(path => this.select(path));
        this.table.onGone = () => this.renderState();
        this.feed = new EventFeed();
        this.historyLoaded = false;
        this.pendingEvents = [];

        this.createButton = h("button", {
            class: "pf-c-button pf-m-primary", type: "button", id: "create-task-button",
            onclick: () => this.openCreate()
        }, _("Create task"));
        this.version = h("span", { class: "sw-version", id: "service-version" });
        this.stateArea = h("div", { id: "state" });
        this.tableArea = h("div", { class: "sw-table-area" }, this.table.element);
        this.messages = h("div", { id: "page-messages" });
        this.service = null;
        this.detail = null;

        this.main = h("div", { class: "sw-layout" },
                      h("div", { class: "sw-main" },
                        h("section", { class: "pf-c-card" },
                          h("div", { class: "pf-c-card__header" },
                            h("div", { class: "pf-c-card__title" },
                              h("h2", { class: "pf-c-title pf-m-lg" }, _("Tasks")), " ", this.version),
                            h("div", { class: "pf-c-card__actions" }, this.createButton)),
                          h("div", { class: "pf-c-card__body" }, this.messages, this.stateArea, this.tableArea))));
        replaceChildren(root,
                        h("main", { class: "pf-c-page__main", tabindex: "-1" },
                          h("section", { class: "pf-c-page__main-section pf-m-light sw-header" },
                            h("h1", { class: "pf-c-title pf-m-2xl" }, _("Container shims"))),
                          h("section", { class: "pf-c-page__main-section" }, this.main)));

        this.service = new Shimwatch({
            state: (state, error) => this.setState(state, error),
            reset: () => this.reset(),
            added: proxy => this.added(proxy),
            changed: proxy => this.changed(proxy),
            removed: proxy => this.removed(proxy),
            signal: (name, args) => this.signal(name, args),
            manager: props => this.manager(props),
        });
        this.detail = new TaskDetail(this.service, () => this.table.select(null));
        this.main.querySelector(".sw-main").appendChild(this.detail.element);
        this.main.appendChild(this.feed.element);
    }

    reset() {
        this.proxies.clear();
        this.table.clear();
        this.detail.close(true);
        this.historyLoaded = false;
        this.pendingEvents = [];
    }

    setState(state, error) {
        const before = this.state;
        this.state = state;
        this.stateError = error;
        if (state === "ready" && before !== "ready")
            this.loadHistory();
        this.renderState();
    }

    renderState() {
        const state = this.state === "ready" && this.table.size === 0 && !this.table.rows.size ? "empty" : this.state;
        this.root.dataset.state = state;
        this.version.hidden = !(state === "ready" || state === "empty");
        this.tableArea.hidden = state !== "ready";
        this.createButton.disabled = !(state === "ready" || state === "empty");
        this.feed.element.hidden = !(state === "ready" || state === "empty");
        const emptyState = (id, title, ...body) => h("div", { class: "pf-c-empty-state", id },
                                                      h("div", { class: "pf-c-empty-state__content" },
                                                        h("h2", { class: "pf-c-title pf-m-lg" }, title),
                                                        h("div", { class: "pf-c-empty-state__body" }, ...body)));
        switch (state) {
        case "connecting":
            replaceChildren(this.stateArea, emptyState("state-connecting", _("Connecting to the shimwatch service…")));
            break;
        case "not-running":
            replaceChildren(this.stateArea, emptyState("state-not-running", _("The shimwatch service is not running"),
                                                       h("p", null, _("Start it as root:")),
                                                       h("pre", { class: "sw-start-command" }, START_COMMAND),
                                                       h("p", null, _("This page shows its tasks as soon as it runs."))));
            break;
        case "not-authorized":
            replaceChildren(this.stateArea, emptyState("state-not-authorized", _("Not authorized"),
                                                       h("p", null, _("You are not allowed to talk to the shimwatch service on the system bus.")),
                                                       this.stateError ? errorAlert(this.stateError) : null));
            break;
        case "failed":
            replaceChildren(this.stateArea, emptyState("state-failed", _("The shimwatch service cannot be reached"),
                                                       this.stateError ? errorAlert(this.stateError) : null));
            break;
        case "empty":
            replaceChildren(this.stateArea, emptyState("state-empty", _("No tasks"),
                                                       h("p", null, _("shimwatch supervises no task at the moment. Create one from an OCI bundle:")),
                                                       h("button", {
                                                           class: "pf-c-button pf-m-primary", type: "button", id: "create-task-empty",
                                                           onclick: () => this.openCreate()
                                                       }, _("Create task"))));
            break;
        default:
            replaceChildren(this.stateArea);
        }
    }

    manager(props) {
        if (props.Version)
            this.version.textContent = cockpit.format(_("shimwatch $0"), props.Version);
    }

    added(proxy) {
        this.proxies.set(proxy.path, proxy);
        this.changed(proxy);
    }

    changed(proxy) {
        if (!proxy.Id)
            return;
        this.proxies.set(proxy.path, proxy);
        this.table.update(proxy);
        this.detail.changed(proxy);
        this.renderState();
    }

    removed(proxy) {
        this.proxies.delete(proxy.path);
        this.table.remove(proxy);
        this.detail.removed(proxy);
        this.renderState();
    }

    select(path) {
        const proxy = this.proxies.get(path);
        if (!proxy)
            return;
        this.table.select(path);
        this.detail.open(proxy);
        this.detail.element.scrollIntoView({ block: "nearest" });
    }

    signal(name, args) {
        const convert = SIGNAL_EVENTS[name];
        if (!convert)
            return;
        if (name === "ShimDisconnected")
            this.table.markDisconnected(args[0]);
        const event = convert(args);
        if (name !== "TaskExit")
            event.time = Date.now() * 1000;
        if (!this.historyLoaded)
            this.pendingEvents.push(event);
        else
            this.feed.add(event, false);
    }

    loadHistory() {
        this.service.history(FEED_SIZE)
                .then(events => {
                    this.feed.load(events);
                    /* signals that came while the history was on its way, unless it had them */
                    const recent = events.slice(-10).map(e => e.event + " " + e.namespace + "/" + e.id);
                    for (const event of this.pendingEvents) {
                        if (!recent.includes(event.event + " " + event.namespace + "/" + event.id))
                            this.feed.add(event, false);
                    }
                })
                .catch(error => {
                    replaceChildren(this.messages, errorAlert(error, _("Reading the history")));
                    for (const event of this.pendingEvents)
                        this.feed.add(event, false);
                })
                .finally(() => {
                    this.pendingEvents = [];
                    this.historyLoaded = true;
                });
    }

    openCreate() {
        openCreateDialog(this.service, path => {
            /* the row is there already (InterfacesAdded comes before the reply) or soon */
            const trySelect = (n) => {
                if (this.proxies.has(path))
                    this.select(path);
                else if (n > 0)
                    window.setTimeout(() => trySelect(n - 1), 100);
            };
            trySelect(20);
        });
    }
}

function init() {
    cockpit.translate();
    window.shimwatchPage = new App(document.getElementById("app"));
}

if (document.readyState === "loading")
    document.addEventListener("DOMContentLoaded", init);
else
    init();
