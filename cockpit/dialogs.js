/* SPDX-License-Identifier: Apache-2.0 */
/* Modal dialogs in PatternFly's markup, and the inline alert that shows a call's error. */

import { h, replaceChildren } from "./dom.js";
import { describeError } from "./service.js";

const _ = cockpit.gettext;

/* an inline alert: kind "danger", "success", "warning" or "info" */
export function alert(kind, title, body) {
    return h("div", { class: "pf-c-alert pf-m-inline pf-m-" + kind, role: kind === "danger" ? "alert" : "status" },
             h("p", { class: "pf-c-alert__title" }, title),
             body ? h("div", { class: "pf-c-alert__description" }, body) : null);
}

/* the alert for a failed call: the kind of error, then the service's own message */
export function errorAlert(error, what) {
    const e = describeError(error);
    const title = what ? cockpit.format(_("$0: $1"), what, e.title) : e.title;
    const node = alert("danger", title, e.message);
    node.dataset.error = e.short;
    return node;
}

/*
 * modal({ id, title, body, actions: [{ label, style, id, action }] }): shows a dialog.
 * An action returns a promise (the dialog stays, its buttons disabled, until it settles;
 * its result closes the dialog, its error is shown in it) or nothing (closes at once).
 */
export function modal({ id, title, body, actions, variant }) {
    const footer = h("footer", { class: "pf-c-modal-box__footer" });
    const errors = h("div", { class: "sw-dialog-errors" });
    const box = h("div", {
        class: "pf-c-modal-box pf-m-" + (variant || "small"),
        role: "dialog", "aria-modal": "true", "aria-labelledby": id + "-title", id
    },
                  h("header", { class: "pf-c-modal-box__header" },
                    h("h1", { class: "pf-c-modal-box__title", id: id + "-title" }, title)),
                  h("div", { class: "pf-c-modal-box__body" }, body, errors),
                  footer);
    const backdrop = h("div", { class: "pf-c-backdrop" }, h("div", { class: "pf-l-bullseye" }, box));
    const close = () => {
        backdrop.remove();
        document.removeEventListener("keydown", onKey);
    };
    const onKey = event => {
        if (event.key === "Escape")
            close();
    };
    const buttons = [];
    for (const action of actions) {
        const button = h("button", {
            class: "pf-c-button pf-m-" + (action.style || "secondary"),
            type: "button", id: action.id || null
        }, action.label);
        button.addEventListener("click", () => {
            if (!action.action) {
                close();
                return;
            }
            replaceChildren(errors);
            const result = action.action();
            if (!result || typeof result.then !== "function") {
                if (result !== false)
                    close();
                return;
            }
            buttons.forEach(b => { b.disabled = true; });
            button.classList.add("pf-m-in-progress");
            result.then(() => close(), error => {
                buttons.forEach(b => { b.disabled = false; });
                button.classList.remove("pf-m-in-progress");
                if (error)
                    errors.appendChild(errorAlert(error));
            });
        });
        buttons.push(button);
        footer.appendChild(button);
    }
    document.addEventListener("keydown", onKey);
    document.body.appendChild(backdrop);
    const first = box.querySelector("input, select, textarea") || buttons[0];
    if (first)
        first.focus();
    return { close, element: box, errors };
}

/* a confirmation: resolves when the person confirmed (after `action` succeeded) */
export function confirm({ id, title, text, body, confirmLabel, danger, action }) {
    return modal({
        id,
        title,
        body: [h("p", null, text), body || null],
        actions: [
            { label: confirmLabel, style: danger ? "danger" : "primary", id: id + "-confirm", action },
            { label: _("Cancel"), style: "link", id: id + "-cancel" },
        ],
    });
}

/* a form field: label above, control, optional help text */
export function field(id, label, control, help) {
    control.id = id;
    return h("div", { class: "pf-c-form__group" },
             h("div", { class: "pf-c-form__group-label" },
               h("label", { class: "pf-c-form__label", for: id }, h("span", { class: "pf-c-form__label-text" }, label))),
             h("div", { class: "pf-c-form__group-control" }, control,
               help ? h("p", { class: "pf-c-form__helper-text", id: id + "-help" }, help) : null));
}
