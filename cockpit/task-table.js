/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The live task table: one row per Shim object, added, updated and removed as the
 * service's InterfacesAdded, PropertiesChanged and InterfacesRemoved arrive. A row whose
 * object went away stays for a moment, marked, so that nobody wonders where it went.
 */

import { h, replaceChildren, statusLabel, exitText, formatAge, formatTime, formatCommand } from "./dom.js";

const _ = cockpit.gettext;

const LINGER_MS = 2500;

export class TaskTable {
    constructor(onSelect) {
        this.onSelect = onSelect;
        this.rows = new Map();          /* object path → { row, proxy, gone } */
        this.selected = null;
        this.body = h("tbody", { role: "rowgroup" });
        const th = (text, extra) => h("th", Object.assign({ role: "columnheader", scope: "col" }, extra || {}), text);
        this.element = h("table", { class: "pf-c-table pf-m-compact pf-m-grid-md", role: "grid", id: "tasks", "aria-label": _("Tasks") },
                         h("thead", null,
                           h("tr", { role: "row" },
                             th(_("Namespace")), th(_("ID")), th(_("Status")), th(_("Command"), { class: "sw-command-header" }),
                             th(_("PID")), th(_("Started")), th(_("Exit")), th(_("Responsive")),
                             th(_("Owner")))),
                         this.body);
        /* the ages move on by themselves: a clock of the page, nothing asked of the service */
        this.timer = window.setInterval(() => this.refreshAges(), 5000);
    }

    get size() {
        let n = 0;
        for (const entry of this.rows.values()) {
            if (!entry.gone)
                n++;
        }
        return n;
    }

    clear() {
        this.rows.clear();
        replaceChildren(this.body);
    }

    update(proxy) {
        if (!proxy.valid && !proxy.Id)
            return;
        let entry = this.rows.get(proxy.path);
        if (entry && entry.gone) {
            /* the same namespace/id again: a new task */
            window.clearTimeout(entry.gone);
            entry.row.remove();
            entry = null;
        }
        if (!entry) {
            entry = { proxy, row: h("tr", { role: "row", class: "sw-task-row", tabindex: "0" }), gone: 0 };
            entry.row.addEventListener("click", () => this.onSelect(entry.proxy.path));
            entry.row.addEventListener("keydown", event => {
                if (event.key === "Enter" || event.key === " ")
                    this.onSelect(entry.proxy.path);
            });
            this.rows.set(proxy.path, entry);
            this.insertSorted(entry);
        }
        entry.proxy = proxy;
        this.render(entry, proxy, proxy.Status);
    }

    insertSorted(entry) {
        const key = entry.proxy.Namespace + "\u0000" + entry.proxy.Id;
        for (const other of this.body.children) {
            if (key < other.dataset.key) {
                this.body.insertBefore(entry.row, other);
                entry.row.dataset.key = key;
                return;
            }
        }
        entry.row.dataset.key = key;
        this.body.appendChild(entry.row);
    }

    render(entry, props, status) {
        const row = entry.row;
        row.dataset.path = entry.proxy.path;
        row.dataset.namespace = props.Namespace;
        row.dataset.id = props.Id;
        row.dataset.status = status;
        row.classList.toggle("pf-m-selected", this.selected === entry.proxy.path);
        row.classList.toggle("sw-gone", Boolean(entry.gone));
        if (entry.disconnected)
            row.dataset.disconnected = "true";
        const cell = (label, klass, ...content) => h("td", { role: "gridcell", "data-label": label, class: klass }, ...content);
        const responsive = props.Responsive === false
            ? h("span", { class: "pf-c-label pf-m-orange" }, h("span", { class: "pf-c-label__content" }, _("no: hung")))
            : _("yes");
        replaceChildren(row,
                        cell(_("Namespace"), "sw-namespace", props.Namespace),
                        cell(_("ID"), "sw-id", h("button", { class: "pf-c-button pf-m-link pf-m-inline", type: "button" }, props.Id)),
                        cell(_("Status"), "sw-status", statusLabel(status),
                             entry.disconnected ? [" ", h("span", { class: "pf-c-label pf-m-red sw-shim-died" },
                                                          h("span", { class: "pf-c-label__content" }, _("shim died")))] : null),
                        cell(_("Command"), "sw-command", h("code", null, formatCommand(props.Command))),
                        cell(_("PID"), "sw-pid", props.TaskPid ? String(props.TaskPid) : "—"),
                        cell(_("Started"), "sw-started",
                             h("span", { title: formatTime(props.StartedAt) }, formatAge(props.StartedAt))),
                        cell(_("Exit"), "sw-exit", exitText(props)),
                        cell(_("Responsive"), "sw-responsive", status === "running" || status === "paused" || status === "created" ? responsive : "—"),
                        cell(_("Owner"), "sw-owner", props.Owner || "shimwatch"));
    }

    /* ShimDisconnected: the row says so until the cleanup removed the object */
    markDisconnected(path) {
        const entry = this.rows.get(path);
        if (!entry || entry.gone)
            return;
        entry.disconnected = true;
        this.render(entry, entry.proxy, entry.proxy.Status);
    }

    /* the object went away (TaskDelete, then InterfacesRemoved): shown as deleted, then gone */
    remove(proxy) {
        const entry = this.rows.get(proxy.path);
        if (!entry || entry.gone)
            return;
        const last = {};
        for (const key of ["Namespace", "Id", "Command", "TaskPid", "StartedAt", "ExitStatus", "ExitReason", "Owner", "Responsive"])
            last[key] = entry.proxy[key];
        last.Status = "deleted";
        entry.last = last;
        entry.gone = window.setTimeout(() => {
            entry.row.remove();
            if (this.rows.get(proxy.path) === entry)
                this.rows.delete(proxy.path);
            if (this.onGone)
                this.onGone();
        }, LINGER_MS);
        this.render(entry, last, "deleted");
    }

    select(path) {
        this.selected = path;
        for (const [key, entry] of this.rows)
            entry.row.classList.toggle("pf-m-selected", key === path);
    }

    refreshAges() {
        for (const entry of this.rows.values()) {
            const props = entry.gone ? entry.last : entry.proxy;
            const started = entry.row.querySelector(".sw-started span");
            if (started && props)
                started.textContent = formatAge(props.StartedAt);
        }
    }
}
