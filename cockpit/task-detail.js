/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One task: its properties (live), its statistics (GetStats and ListPids, asked again
 * every few seconds while the panel is open), its output (ReadLog, then the lines written
 * since, once a second: Cockpit's D-Bus channel does not pass OpenLog's file descriptor),
 * and the actions, destructive ones after a confirmation.
 */

import {
    h, replaceChildren, statusLabel, exitText, reasonText, formatTime, formatAge, formatBytes,
    formatDuration, formatCommand
} from "./dom.js";
import { alert, errorAlert, confirm, field } from "./dialogs.js";
import { describeError, isNotAuthorized, unwrap } from "./service.js";

const _ = cockpit.gettext;

const STATS_INTERVAL_MS = 3000;
const LOG_INTERVAL_MS = 1000;
const LOG_TAIL = 500;
const LOG_KEEP = 2000;

const SIGNALS = [["SIGTERM", 15], ["SIGKILL", 9], ["SIGINT", 2], ["SIGHUP", 1], ["SIGUSR1", 10], ["SIGUSR2", 12]];

export class TaskDetail {
    constructor(service, onClose) {
        this.service = service;
        this.onClose = onClose;
        this.proxy = null;
        this.path = null;
        this.gone = false;
        this.result = null;             /* the last action's outcome, an alert node */
        this.timers = [];
        this.element = h("section", { class: "pf-c-card sw-detail", id: "task-detail", hidden: true });
    }

    open(proxy) {
        this.close(true);
        this.proxy = proxy;
        this.path = proxy.path;
        this.gone = false;
        this.result = null;
        this.logLines = [];
        this.logLast = 0;
        this.logState = "loading";
        this.logError = null;
        this.stats = null;
        this.statsError = null;
        this.pids = null;
        this.busy = false;

        this.heading = h("h2", { class: "pf-c-title pf-m-xl", id: "task-detail-title" });
        this.status = h("span", { id: "task-detail-status" });
        this.actions = h("div", { class: "sw-actions", id: "task-actions" });
        this.resultArea = h("div", { class: "sw-result", id: "task-result", "aria-live": "polite" });
        this.props = h("dl", { class: "pf-c-description-list pf-m-horizontal pf-m-compact", id: "task-properties" });
        this.statsArea = h("dl", { class: "pf-c-description-list pf-m-horizontal pf-m-compact", id: "task-stats" });
        this.logArea = h("pre", { class: "sw-log", id: "task-log", tabindex: "0", "aria-label": _("Output") });
        this.logStatus = h("p", { class: "sw-log-status", id: "task-log-status" });

        replaceChildren(this.element,
                        h("div", { class: "pf-c-card__header" },
                          h("div", { class: "pf-c-card__title sw-detail-title" }, this.heading, this.status),
                          h("div", { class: "pf-c-card__actions" },
                            h("button", {
                                class: "pf-c-button pf-m-plain", type: "button", id: "task-detail-close",
                                "aria-label": _("Close"), onclick: () => this.close()
                            }, "✕"))),
                        h("div", { class: "pf-c-card__body" },
                          this.actions, this.resultArea,
                          h("div", { class: "sw-detail-grid" },
                            h("div", null, h("h3", { class: "pf-c-title pf-m-md" }, _("Properties")), this.props),
                            h("div", null, h("h3", { class: "pf-c-title pf-m-md" }, _("Usage")), this.statsArea)),
                          h("h3", { class: "pf-c-title pf-m-md" }, _("Output")),
                          this.logStatus, this.logArea));
        this.element.hidden = false;
        this.render();
        this.refreshStats();
        this.readLog();
        this.timers.push(window.setInterval(() => this.refreshStats(), STATS_INTERVAL_MS));
        this.timers.push(window.setInterval(() => this.readLog(), LOG_INTERVAL_MS));
    }

    close(quiet) {
        this.timers.forEach(t => window.clearInterval(t));
        this.timers = [];
        this.element.hidden = true;
        this.path = null;
        this.proxy = null;
        if (!quiet && this.onClose)
            this.onClose();
    }

    /* the shown task's properties changed */
    changed(proxy) {
        if (proxy.path !== this.path)
            return;
        this.proxy = proxy;
        this.render();
    }

    /* the shown task's object went away */
    removed(proxy) {
        if (proxy.path !== this.path)
            return;
        this.snapshot = Object.assign({}, this.lastProps || {});
        this.gone = true;
        this.render();
    }

    get props_() {
        if (this.gone)
            return this.snapshot;
        const p = {};
        for (const key of ["Namespace", "Id", "Status", "Owner", "Runtime", "BundleSource", "Bundle",
            "Command", "Labels", "TaskPid", "ShimPid", "CreatedAt", "StartedAt", "ExitedAt",
            "ExitStatus", "ExitReason", "Responsive", "CgroupPath", "Address"])
            p[key] = this.proxy[key];
        this.lastProps = p;
        return p;
    }

    render() {
        const p = this.props_;
        const status = this.gone ? "deleted" : p.Status;
        this.heading.textContent = p.Namespace + "/" + p.Id;
        replaceChildren(this.status, statusLabel(status));
        this.renderActions(p, status);
        this.renderResult(p);
        const item = (term, value, id) => h("div", { class: "pf-c-description-list__group", "data-field": id },
                                            h("dt", { class: "pf-c-description-list__term" }, h("span", { class: "pf-c-description-list__text" }, term)),
                                            h("dd", { class: "pf-c-description-list__description" }, h("div", { class: "pf-c-description-list__text" }, value)));
        const labels = Object.entries(p.Labels || {}).map(([k, v]) => k + "=" + v).join(", ");
        replaceChildren(this.props,
                        item(_("Status"), status, "status"),
                        item(_("Command"), h("code", null, formatCommand(p.Command)), "command"),
                        item(_("Task PID"), p.TaskPid ? String(p.TaskPid) : "—", "task-pid"),
                        item(_("Shim PID"), p.ShimPid ? String(p.ShimPid) : "—", "shim-pid"),
                        item(_("Runtime"), p.Runtime, "runtime"),
                        item(_("Bundle"), p.BundleSource || "—", "bundle"),
                        item(_("Task directory"), p.Bundle, "task-directory"),
                        item(_("Cgroup"), p.CgroupPath || "—", "cgroup"),
                        item(_("Owner"), p.Owner, "owner"),
                        item(_("Labels"), labels || "—", "labels"),
                        item(_("Created"), formatTime(p.CreatedAt), "created"),
                        item(_("Started"), p.StartedAt ? formatTime(p.StartedAt) + " (" + formatAge(p.StartedAt) + ")" : "—", "started"),
                        p.ExitedAt ? item(_("Exited"), formatTime(p.ExitedAt), "exited") : null,
                        exitText(p) ? item(_("Exit status"), String(p.ExitStatus), "exit-status") : null,
                        p.ExitReason ? item(_("Exit reason"), reasonText(p.ExitReason), "exit-reason") : null,
                        item(_("Responsive"), p.Responsive === false ? _("no: the shim does not answer its health check") : _("yes"), "responsive"));
        this.renderStats();
        this.renderLog();
    }

    renderActions(p, status) {
        const button = (id, label, style, enabled, handler) => {
            const b = h("button", { class: "pf-c-button pf-m-" + style, type: "button", id, onclick: handler }, label);
            b.disabled = !enabled || this.busy || this.gone;
            return b;
        };
        replaceChildren(this.actions,
                        status === "created" ? button("task-start", _("Start"), "primary", true, () => this.start()) : null,
                        button("task-stop", _("Stop"), "secondary", status === "running" || status === "created", () => this.confirmStop()),
                        status === "paused"
                            ? button("task-resume", _("Resume"), "secondary", true, () => this.simple("Resume", _("Resume")))
                            : button("task-pause", _("Pause"), "secondary", status === "running", () => this.simple("Pause", _("Pause"))),
                        button("task-kill", _("Kill"), "secondary", ["created", "running", "paused"].includes(status), () => this.confirmKill()),
                        button("task-delete", _("Delete"), "secondary", status === "stopped", () => this.confirmDelete()),
                        button("task-reap", _("Reap"), "danger", true, () => this.confirmReap()));
    }

    /* the outcome of the last action; a Stop's shows the exit as the task's properties tell it */
    renderResult(p) {
        if (!this.result) {
            replaceChildren(this.resultArea);
            return;
        }
        let node = this.result;
        if (typeof node === "function")
            node = node(p);
        replaceChildren(this.resultArea, node);
    }

    setResult(result) {
        this.result = result;
        if (this.path)
            this.renderResult(this.props_);
    }

    run(what, promise) {
        this.busy = true;
        this.setResult(null);
        this.render();
        return promise
                .then(value => {
                    this.busy = false;
                    if (this.path)
                        this.render();
                    return value;
                }, error => {
                    this.busy = false;
                    this.setResult(this.authorizationHint(errorAlert(error, what), error));
                    if (this.path)
                        this.render();
                    throw error;
                });
    }

    authorizationHint(node, error) {
        if (describeError(error).short === "NotAuthorizedCanObtain") {
            node.appendChild(h("div", { class: "pf-c-alert__description" },
                               _("Turn on administrative access in Cockpit, or ask an administrator for the polkit authorization.")));
        }
        return node;
    }

    start() {
        const path = this.path;
        this.run(_("Start"), this.service.shimCall(path, "Start"))
                .then(([pid]) => this.setResult(alert("success", cockpit.format(_("Started, PID $0"), pid))), () => {});
    }

    simple(method, label) {
        this.run(label, this.service.shimCall(this.path, method)).catch(() => {});
    }

    confirmStop() {
        const p = this.props_;
        const timeout = h("input", { class: "pf-c-form-control", type: "number", min: "1", max: "3600", value: "10" });
        confirm({
            id: "confirm-stop",
            title: cockpit.format(_("Stop $0?"), p.Namespace + "/" + p.Id),
            text: _("The task gets SIGTERM, and every process of it SIGKILL once the timeout has passed."),
            body: h("form", { class: "pf-c-form", onsubmit: e => e.preventDefault() },
                    field("stop-timeout", _("Timeout (seconds)"), timeout)),
            confirmLabel: _("Stop"),
            danger: true,
            action: () => {
                const seconds = parseInt(timeout.value, 10);
                if (!(seconds >= 1 && seconds <= 3600))
                    return Promise.reject(new Error(_("The timeout is a number of seconds from 1 to 3600.")));
                const path = this.path;
                this.run(_("Stop"), this.service.shimCall(path, "Stop", [seconds], "u"))
                        .then(([status]) => {
                            /* the reason is the task's ExitReason, set before TaskExit */
                            this.setResult(q => {
                                const node = alert("success", cockpit.format(_("Stopped: exit status $0"), status),
                                                   q.ExitReason ? cockpit.format(_("Reason: $0"), reasonText(q.ExitReason)) : null);
                                node.id = "task-stop-result";
                                node.dataset.exitStatus = status;
                                node.dataset.exitReason = q.ExitReason || "";
                                return node;
                            });
                        }, () => {});
            },
        });
    }

    confirmKill() {
        const p = this.props_;
        const signal = h("select", { class: "pf-c-form-control" },
                         SIGNALS.map(([name, number]) => h("option", { value: String(number) }, name + " (" + number + ")")));
        const all = h("input", { class: "pf-c-check__input", type: "checkbox", id: "kill-all" });
        confirm({
            id: "confirm-kill",
            title: cockpit.format(_("Send a signal to $0?"), p.Namespace + "/" + p.Id),
            text: _("The signal goes to the task's init process, or to every process of the task."),
            body: h("form", { class: "pf-c-form", onsubmit: e => e.preventDefault() },
                    field("kill-signal", _("Signal"), signal),
                    h("div", { class: "pf-c-check" }, all,
                      h("label", { class: "pf-c-check__label", for: "kill-all" }, _("Every process of the task")))),
            confirmLabel: _("Kill"),
            danger: true,
            action: () => {
                const number = parseInt(signal.value, 10);
                const name = SIGNALS.find(s => s[1] === number)[0];
                this.run(_("Kill"), this.service.shimCall(this.path, "Kill", [number, all.checked], "ub"))
                        .then(() => this.setResult(alert("success", cockpit.format(_("$0 sent"), name))), () => {});
            },
        });
    }

    confirmDelete() {
        const p = this.props_;
        confirm({
            id: "confirm-delete",
            title: cockpit.format(_("Delete $0?"), p.Namespace + "/" + p.Id),
            text: _("The stopped task is deleted with its runtime state; its output stays readable until the log retention ends."),
            confirmLabel: _("Delete"),
            danger: true,
            action: () => {
                this.run(_("Delete"), this.service.shimCall(this.path, "Delete"))
                        .then(([status]) => this.setResult(alert("success", cockpit.format(_("Deleted: exit status $0"), status))), () => {});
            },
        });
    }

    confirmReap() {
        const p = this.props_;
        confirm({
            id: "confirm-reap",
            title: cockpit.format(_("Reap $0?"), p.Namespace + "/" + p.Id),
            text: _("The shim is killed with SIGKILL, then everything of the task is cleaned up: its processes, runtime state, cgroup and task directory."),
            confirmLabel: _("Reap"),
            danger: true,
            action: () => {
                this.run(_("Reap"), this.service.reap(p.Namespace, p.Id))
                        .then(status => {
                            const node = alert("success", cockpit.format(_("Reaped: exit status $0"), status));
                            node.id = "task-reap-result";
                            this.setResult(node);
                        }, () => {});
            },
        });
    }

    /* GetStats and ListPids, while the panel is open */
    refreshStats() {
        if (!this.path || this.gone || cockpit.hidden)
            return;
        const path = this.path;
        const status = this.proxy.Status;
        if (!["running", "paused", "created"].includes(status)) {
            this.stats = null;
            this.statsError = null;
            this.pids = [];
            this.renderStats();
            return;
        }
        Promise.all([this.service.shimCall(path, "GetStats"), this.service.shimCall(path, "ListPids")])
                .then(([[stats], [pids]]) => {
                    if (path !== this.path)
                        return;
                    this.stats = unwrap(stats);
                    this.pids = pids;
                    this.statsError = null;
                    this.renderStats();
                })
                .catch(error => {
                    if (path !== this.path)
                        return;
                    this.statsError = describeError(error);
                    this.renderStats();
                });
    }

    renderStats() {
        const item = (term, value) => h("div", { class: "pf-c-description-list__group" },
                                        h("dt", { class: "pf-c-description-list__term" }, h("span", { class: "pf-c-description-list__text" }, term)),
                                        h("dd", { class: "pf-c-description-list__description" }, h("div", { class: "pf-c-description-list__text" }, value)));
        if (this.statsError && this.statsError.short !== "BadState") {
            replaceChildren(this.statsArea, item(_("Usage"), this.statsError.message));
            return;
        }
        const s = this.stats;
        if (!s) {
            replaceChildren(this.statsArea, item(_("Processes"), this.gone || this.statsError ? _("none") : "…"));
            return;
        }
        replaceChildren(this.statsArea,
                        item(_("Memory"), formatBytes(s.memory_current || 0)),
                        item(_("Memory limit"), s.memory_max ? formatBytes(s.memory_max) : _("none")),
                        item(_("CPU time"), formatDuration(s.cpu_usage_usec || 0)),
                        item(_("Processes"), String(s.pids_current || 0)),
                        item(_("PIDs"), (this.pids || []).join(" ") || "—"));
    }

    /* ReadLog once with a tail, then the lines written since the last one seen */
    readLog() {
        if (!this.path || this.logState === "unavailable" || this.logState === "denied" || cockpit.hidden)
            return;
        if (this.logPending)
            return;
        const path = this.path;
        const options = this.logLast ? { since: { t: "t", v: this.logLast } } : { tail: { t: "u", v: LOG_TAIL } };
        this.logPending = true;
        this.service.shimCall(path, "ReadLog", [options], "a{sv}")
                .then(([lines]) => {
                    this.logPending = false;
                    if (path !== this.path)
                        return;
                    this.addLines(lines);
                    this.logState = this.gone ? "ended" : "following";
                    this.renderLog();
                    if (this.gone)
                        this.timers.forEach(t => window.clearInterval(t));
                })
                .catch(error => {
                    this.logPending = false;
                    if (path !== this.path)
                        return;
                    const e = describeError(error);
                    if (isNotAuthorized(error))
                        this.logState = "denied";
                    else if (e.short === "NotFound" || e.name === "org.freedesktop.DBus.Error.UnknownObject" ||
                             e.name === "org.freedesktop.DBus.Error.UnknownMethod")
                        this.logState = this.gone ? "ended" : "unavailable";
                    else
                        this.logState = "error";
                    this.logError = e;
                    this.renderLog();
                });
    }

    addLines(lines) {
        /* "since" includes the lines of the last time seen: skip those already shown */
        let skip = this.logLines.filter(l => l[0] === this.logLast).length;
        const fresh = [];
        for (const line of lines) {
            if (line[0] === this.logLast && skip > 0) {
                skip--;
                continue;
            }
            fresh.push(line);
        }
        if (!fresh.length)
            return;
        const atBottom = this.logArea.scrollTop + this.logArea.clientHeight >= this.logArea.scrollHeight - 4;
        for (const [time, stream, text] of fresh) {
            this.logLines.push([time, stream, text]);
            this.logArea.appendChild(h("span", { class: "sw-log-line sw-" + stream },
                                       h("span", { class: "sw-log-time" }, new Date(time / 1000).toISOString()), " ",
                                       stream === "stderr" ? h("span", { class: "sw-log-stream" }, "stderr ") : null,
                                       text, "\n"));
            this.logLast = time;
        }
        while (this.logLines.length > LOG_KEEP) {
            this.logLines.shift();
            this.logArea.removeChild(this.logArea.firstChild);
        }
        if (atBottom)
            this.logArea.scrollTop = this.logArea.scrollHeight;
    }

    renderLog() {
        if (!this.logStatus)
            return;
        const texts = {
            loading: _("Reading the output…"),
            following: _("Following the output as it comes."),
            ended: _("The task was deleted: this is all of its output."),
            unavailable: _("The service does not keep this task's output (it was created with its own stdout, or with the option log off)."),
            denied: _("You are not allowed to read this task's output (polkit action org.shimwatch.read-logs)."),
            error: this.logError ? this.logError.title + ": " + this.logError.message : "",
        };
        this.logStatus.textContent = texts[this.logState] || "";
        this.logStatus.dataset.state = this.logState;
        this.logArea.hidden = this.logState === "denied" || this.logState === "unavailable";
        if (this.logState === "following" && !this.logLines.length)
            this.logStatus.textContent = _("No output yet. New lines appear as the task writes them.");
    }
}
