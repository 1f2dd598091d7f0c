/* SPDX-License-Identifier: Apache-2.0 */
/* The "Create task" dialog: CreateTask with its options; errors in the service's words. */

import { h } from "./dom.js";
import { modal, field } from "./dialogs.js";
import { variant } from "./service.js";

const _ = cockpit.gettext;

const RUNTIMES = ["io.containerd.runc.v2", "io.containerd.runc.v1"];

class InputError extends Error {
    constructor(message) {
        super(message);
        this.name = "";
        this.title = _("The form is not complete");
    }
}

/* "key=value" lines → { key: value }; throws InputError for a line without "=" */
export function parseLabels(text) {
    const labels = {};
    for (const raw of text.split("\n")) {
        const line = raw.trim();
        if (!line)
            continue;
        const eq = line.indexOf("=");
        if (eq <= 0)
            throw new InputError(cockpit.format(_("A label is key=value, one per line: “$0”"), line));
        labels[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
    }
    return labels;
}

export function openCreateDialog(service, onCreated) {
    const namespace = h("input", { class: "pf-c-form-control", type: "text", value: "default", required: true, autocomplete: "off" });
    const id = h("input", { class: "pf-c-form-control", type: "text", required: true, autocomplete: "off" });
    const bundle = h("input", { class: "pf-c-form-control", type: "text", required: true, placeholder: "/srv/bundles/web1", autocomplete: "off" });
    const runtime = h("input", { class: "pf-c-form-control", type: "text", value: RUNTIMES[0], list: "create-runtimes", autocomplete: "off" });
    const labels = h("textarea", { class: "pf-c-form-control", rows: "3", placeholder: "app=web\ntier=front" });
    const start = h("input", { class: "pf-c-check__input", type: "checkbox", id: "create-start", checked: true });

    const form = h("form", { class: "pf-c-form", id: "create-form", onsubmit: event => { event.preventDefault(); document.getElementById("create-task-confirm").click(); } },
                   field("create-namespace", _("Namespace"), namespace),
                   field("create-id", _("ID"), id, _("Letters, digits, “.”, “_” and “-”, at most 76 characters.")),
                   field("create-bundle", _("Bundle path"), bundle,
                         _("The absolute path of an OCI bundle: a directory with config.json and the root file system it names.")),
                   field("create-runtime", _("Runtime"), runtime),
                   h("datalist", { id: "create-runtimes" }, RUNTIMES.map(r => h("option", { value: r }))),
                   field("create-labels", _("Labels"), labels, _("One key=value per line.")),
                   h("div", { class: "pf-c-check" }, start,
                     h("label", { class: "pf-c-check__label", for: "create-start" }, _("Start the task"))),
                   h("button", { type: "submit", hidden: true }));

    modal({
        id: "create-task",
        title: _("Create task"),
        variant: "medium",
        body: form,
        actions: [
            {
                label: _("Create"),
                style: "primary",
                id: "create-task-confirm",
                action: () => {
                    let options;
                    try {
                        if (!namespace.value.trim())
                            throw new InputError(_("The namespace is missing."));
                        if (!id.value.trim())
                            throw new InputError(_("The ID is missing."));
                        if (!bundle.value.trim())
                            throw new InputError(_("The bundle path is missing."));
                        options = {
                            start: variant("b", start.checked),
                            labels: variant("a{ss}", parseLabels(labels.value)),
                        };
                        if (runtime.value.trim())
                            options.runtime = variant("s", runtime.value.trim());
                    } catch (error) {
                        return Promise.reject(error);
                    }
                    return service.createTask(namespace.value.trim(), id.value.trim(), bundle.value.trim(), options)
                            .then(path => onCreated(path));
                },
            },
            { label: _("Cancel"), style: "link", id: "create-task-cancel" },
        ],
    });
}
