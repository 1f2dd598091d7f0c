/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event feed: the recent lifecycle events from GetHistory when the page opens, then
 * the lifecycle signals (TaskCreate, TaskStart, ShimDisconnected, TaskExit, TaskDelete,
 * TaskOOM) as the service emits them. Newest first.
 */

import { h, formatClock, formatTime, reasonText } from "./dom.js";

const _ = cockpit.gettext;

export const FEED_SIZE = 50;

const EVENT_TEXT = {
    create: _("created"),
    start: _("started"),
    exit: _("exited"),
    disconnected: _("shim disconnected"),
    delete: _("deleted"),
    reap: _("reaped"),
    oom: _("OOM kill"),
};

/* the live signals, as the history names them */
export const SIGNAL_EVENTS = {
    TaskCreate: args => ({ event: "create", namespace: args[1], id: args[2], pid: args[4] }),
    TaskStart: args => ({ event: "start", namespace: args[1], id: args[2], pid: args[3] }),
    ShimDisconnected: args => ({ event: "disconnected", namespace: args[1], id: args[2], pid: args[3] }),
    TaskExit: args => ({ event: "exit", namespace: args[1], id: args[3], pid: args[4], exit_status: args[5], time: args[6] }),
    TaskDelete: args => ({ event: "delete", namespace: args[1], id: args[3], pid: args[4], exit_status: args[5] }),
    TaskOOM: args => ({ event: "oom", namespace: args[1], id: args[2] }),
};

export class EventFeed {
    constructor() {
        this.list = h("ol", { class: "sw-events", id: "events", "aria-live": "polite" });
        this.empty = h("p", { class: "sw-events-empty" }, _("No events yet."));
        this.element = h("section", { class: "pf-c-card sw-feed", "aria-labelledby": "events-title" },
                         h("div", { class: "pf-c-card__title" },
                           h("h2", { class: "pf-c-title pf-m-lg", id: "events-title" }, _("Events"))),
                         h("div", { class: "pf-c-card__body" }, this.empty, this.list));
    }

    clear() {
        while (this.list.firstChild)
            this.list.removeChild(this.list.firstChild);
        this.empty.hidden = false;
    }

    /* history: oldest first, as GetHistory gives it */
    load(events) {
        this.clear();
        for (const event of events)
            this.add(event, true);
    }

    add(event, fromHistory) {
        const time = event.time || Date.now() * 1000;
        const details = [];
        if (event.pid)
            details.push(cockpit.format(_("PID $0"), event.pid));
        if (event.exit_status !== undefined)
            details.push(cockpit.format(_("exit status $0"), event.exit_status));
        if (event.reason)
            details.push(reasonText(event.reason));
        const item = h("li", {
            class: "sw-event sw-event-" + event.event,
            "data-event": event.event,
            "data-task": event.namespace + "/" + event.id,
            "data-source": fromHistory ? "history" : "signal",
        },
                       h("time", { title: formatTime(time) }, formatClock(time)), " ",
                       h("span", { class: "sw-event-name" }, EVENT_TEXT[event.event] || event.event), " ",
                       h("span", { class: "sw-event-task" }, event.namespace + "/" + event.id),
                       details.length ? h("span", { class: "sw-event-details" }, " · " + details.join(", ")) : null);
        this.list.insertBefore(item, this.list.firstChild);
        while (this.list.children.length > FEED_SIZE)
            this.list.removeChild(this.list.lastChild);
        this.empty.hidden = true;
    }
}
