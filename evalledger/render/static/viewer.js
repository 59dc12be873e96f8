// evalledger viewer: live updates and the time-travel slider. Each page holds it inline,
// at the end of its body; the app's Content-Security-Policy allows it by its hash, and
// no other script.
(function () {
  "use strict";
  const body = document.body;
  // Set once per page load: a test that sees it unchanged knows the page never reloaded.
  window.evalledgerLoadedAt = window.evalledgerLoadedAt || Date.now();

  // Delegated: the slider is part of the live region, replaced on every update.
  document.addEventListener("input", function (event) {
    const shown = document.getElementById("at-value");
    if (event.target.id === "at" && shown) { shown.textContent = event.target.value; }
  });
  document.addEventListener("change", function (event) {
    if (event.target.id === "at") { event.target.form.submit(); }
  });

  // The task table filters as you type or choose: the table (the live region) is
  // fetched for the form's query and swapped in, the address follows, the caret stays.
  let typing = null;
  async function filterTasks(form) {
    const query = new URLSearchParams(new FormData(form));
    for (const [name, value] of Array.from(query.entries())) {
      if (!value) { query.delete(name); }
    }
    const address = form.getAttribute("action") + (query.toString() ? "?" + query : "");
    const live = address + (query.toString() ? "&" : "?") + "fragment=live";
    const response = await fetch(live, { credentials: "same-origin" });
    if (!response.ok) { return; }
    const active = document.activeElement;
    const focused = active && active.name &&
      '[name="' + active.name + '"]' + (active.type === "checkbox" ? '[value="' + active.value + '"]' : "");
    const region = document.getElementById("live");
    region.innerHTML = await response.text();
    history.replaceState(null, "", address);
    body.dataset.live = live;
    const again = focused && region.querySelector("form.task-filter " + focused);
    if (again) {
      again.focus();
      if (again.setSelectionRange && again.type === "search") {
        again.setSelectionRange(again.value.length, again.value.length);
      }
    }
  }
  document.addEventListener("input", function (event) {
    const form = event.target.form;
    if (!form || !form.classList.contains("task-filter") || event.target.type !== "search") {
      return;
    }
    clearTimeout(typing);
    typing = setTimeout(function () { filterTasks(form); }, 250);
  });
  document.addEventListener("change", function (event) {
    const form = event.target.form;
    if (form && form.classList.contains("task-filter") &&
        (event.target.tagName === "SELECT" || event.target.type === "checkbox")) {
      filterTasks(form);
    }
  });

  // Keys walk the list a task page was opened from: j / k the next and previous
  // failure, the arrow keys the next and previous task (each a link marked data-key).
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) { return; }
    const target = event.target;
    if (target && (target.isContentEditable ||
                   /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) { return; }
    const link = document.querySelector('a[data-key="' + event.key + '"]');
    if (link) { event.preventDefault(); window.location.assign(link.href); }
  });

  const stream = body.dataset.stream;
  if (!stream || !window.EventSource) { return; }
  const run = body.dataset.run || null;
  const task = body.dataset.task || null;

  // One request at a time per page; a notice arriving meanwhile asks for one more.
  let busy = false;
  let again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      if (body.dataset.live) {
        const response = await fetch(body.dataset.live, { credentials: "same-origin" });
        if (response.ok) {
          const live = document.getElementById("live");
          // The runs ticked for comparison stay ticked when the table is redrawn.
          const ticked = new Set(Array.from(live.querySelectorAll("input[type=checkbox]:checked"),
                                            function (box) { return box.value; }));
          live.innerHTML = await response.text();
          live.querySelectorAll("input[type=checkbox]").forEach(function (box) {
            if (ticked.has(box.value)) { box.checked = true; }
          });
        }
      }
      if (body.dataset.attempts) {
        const response = await fetch(body.dataset.attempts, { credentials: "same-origin" });
        if (response.ok) { document.getElementById("attempts").innerHTML = await response.text(); }
      }
      if (body.dataset.tail) {
        const url = body.dataset.tail + "&after=" + encodeURIComponent(body.dataset.after || "0");
        const response = await fetch(url, { credentials: "same-origin" });
        if (response.ok) {
          const last = response.headers.get("X-Last-Seq");
          const rows = await response.text();
          if (rows.trim()) {
            document.getElementById("lines").insertAdjacentHTML("beforeend", rows);
            const empty = document.getElementById("no-lines");
            if (empty) { empty.remove(); }
          }
          if (last) { body.dataset.after = last; }
          if (response.headers.get("X-More") === "1") { again = true; }
        }
      }
      body.dataset.updated = String(Date.now());
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }

  const source = new EventSource(stream);
  source.addEventListener("change", function (event) {
    const change = JSON.parse(event.data);
    if (run && change.runs.indexOf(run) < 0) { return; }
    if (task && !change.many_tasks &&
        !change.tasks.some(function (t) { return t[0] === run && t[1] === task; })) { return; }
    refresh();
  });
  // What was folded after the page was made and before it subscribed sends no change
  // notice: the hello names how far the folds have read, and a page made earlier
  // refreshes once.
  source.addEventListener("hello", function (event) {
    const seq = JSON.parse(event.data).seq;
    if (body.dataset.seq !== undefined && String(seq) !== body.dataset.seq) { refresh(); }
  });
  source.addEventListener("open", function () { body.dataset.streaming = "1"; });
})();
