/* SPDX-License-Identifier: Apache-2.0 */
/* Building DOM nodes (text always as text, never as HTML) and formatting values. */

const _ = cockpit.gettext;

/* h("button", { class: "pf-c-button", onclick: fn }, "Text", child, [more], null) */
export function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
        if (value === null || value === undefined || value === false)
            continue;
        if (key.startsWith("on") && typeof value === "function")
            node.addEventListener(key.slice(2), value);
        else if (key === "class")
            node.className = value;
        else if (key === "value")
            node.value = value;
        else if (key === "checked")
            node.checked = Boolean(value);
        else
            node.setAttribute(key, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
}

function append(node, children) {
    for (const child of children) {
        if (child === null || child === undefined || child === false)
            continue;
        if (Array.isArray(child))
            append(node, child);
        else if (child instanceof Node)
            node.appendChild(child);
        else
            node.appendChild(document.createTextNode(String(child)));
    }
}

export function replaceChildren(node, ...children) {
    while (node.firstChild)
        node.removeChild(node.firstChild);
    append(node, children);
}

/* µs since the epoch, as the service gives times */
export function formatTime(usec) {
    if (!usec)
        return "—";
    return new Date(usec / 1000).toLocaleString(cockpit.language);
}

export function formatClock(usec) {
    return new Date(usec / 1000).toLocaleTimeString(cockpit.language);
}

export function formatAge(usec, now) {
    if (!usec)
        return "—";
    const seconds = Math.max(0, Math.round(((now || Date.now()) - usec / 1000) / 1000));
    const rtf = new Intl.RelativeTimeFormat(cockpit.language, { numeric: "always", style: "short" });
    if (seconds < 60)
        return rtf.format(-seconds, "second");
    if (seconds < 3600)
        return rtf.format(-Math.floor(seconds / 60), "minute");
    if (seconds < 86400)
        return rtf.format(-Math.floor(seconds / 3600), "hour");
    return rtf.format(-Math.floor(seconds / 86400), "day");
}

export function formatBytes(bytes) {
    if (bytes < 1024)
        return cockpit.format(_("$0 B"), bytes);
    const units = [_("KiB"), _("MiB"), _("GiB"), _("TiB")];
    let value = bytes / 1024;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
        value /= 1024;
        unit++;
    }
    return value.toLocaleString(cockpit.language, { maximumFractionDigits: 1 }) + " " + units[unit];
}

export function formatDuration(usec) {
    const seconds = usec / 1e6;
    return cockpit.format(_("$0 s"), seconds.toLocaleString(cockpit.language, { maximumFractionDigits: 2 }));
}

/* the task's process.args as a shell would show them */
export function formatCommand(args) {
    const plain = new RegExp("^[\\w@%+=:,./-]+$");
    return (args || []).map(a => plain.test(a) ? a : "'" + a.split("'").join("'\\''") + "'").join(" ");
}

const STATUS_TEXT = {
    created: _("created"),
    running: _("running"),
    paused: _("paused"),
    stopped: _("stopped"),
    disconnected: _("disconnected"),
    cleaning: _("cleaning up"),
    deleted: _("deleted"),
};

const STATUS_COLOUR = {
    created: "pf-m-blue",
    running: "pf-m-green",
    paused: "pf-m-cyan",
    stopped: "",
    disconnected: "pf-m-red",
    cleaning: "pf-m-orange",
    deleted: "",
};

export function statusLabel(status) {
    return h("span", { class: "pf-c-label " + (STATUS_COLOUR[status] || ""), "data-status": status },
             h("span", { class: "pf-c-label__content" }, STATUS_TEXT[status] || status));
}

const REASON_TEXT = {
    exited: _("exited"),
    signaled: _("killed by a signal"),
    "oom-killed": _("killed by the OOM killer"),
    "shim-died": _("its shim died"),
    unknown: _("unknown"),
};

export function reasonText(reason) {
    return REASON_TEXT[reason] || reason;
}

/* "137 (killed by a signal)" once the task exited, else "" */
export function exitText(props) {
    if (!props.ExitReason && props.Status !== "stopped")
        return "";
    if (!props.ExitReason)
        return String(props.ExitStatus);
    return cockpit.format(_("$0 ($1)"), props.ExitStatus, reasonText(props.ExitReason));
}
