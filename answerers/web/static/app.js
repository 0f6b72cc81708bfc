// askq web inbox: live updates over Server-Sent Events. Served from this origin (the
// Content-Security-Policy allows no inline script). Every HTML fragment it inserts was
// rendered (and escaped) by the server; text from events goes in as text.
"use strict";
(function () {
  function ageText(ms) {
    var s = Math.max(0, Math.floor((Date.now() - ms) / 1000));
    if (s < 5) return "just now";
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " d ago";
  }
  function updateAges() {
    document.querySelectorAll("time[data-ms]").forEach(function (t) {
      t.textContent = ageText(Number(t.dataset.ms));
    });
  }
  setInterval(updateAges, 10000);

  function fragment(html) {
    var t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }
  function onEvent(source, name, handler) {
    source.addEventListener(name, function (e) {
      handler(JSON.parse(e.data));
    });
  }

  var list = document.getElementById("inbox");
  if (list && list.dataset.stream) {
    var live = document.getElementById("live");
    var empty = document.getElementById("empty");
    var count = document.getElementById("count");
    var recount = function () {
      var n = list.querySelectorAll("li.item:not(.gone)").length;
      count.textContent = String(n);
      empty.hidden = n > 0;
    };
    var stream = new EventSource(list.dataset.stream);
    stream.onopen = function () { live.dataset.state = "live"; live.textContent = "live"; };
    stream.onerror = function () { live.dataset.state = "reconnecting"; live.textContent = "reconnecting…"; };
    onEvent(stream, "snapshot", function (d) {
      list.replaceChildren(fragment(d.html));
      updateAges();
      recount();
    });
    onEvent(stream, "offer", function (d) {
      var node = fragment(d.html);
      var old = document.getElementById("req-" + d.id);
      if (old) old.replaceWith(node); else list.prepend(node);
      var item = document.getElementById("req-" + d.id);
      if (item) item.classList.add("new");
      updateAges();
      recount();
    });
    onEvent(stream, "gone", function (d) {
      var item = document.getElementById("req-" + d.id);
      if (!item || item.classList.contains("gone")) return;
      item.classList.add("gone");
      item.querySelector(".reason").textContent = d.reason;
      recount();
      setTimeout(function () { item.remove(); recount(); }, 8000);
    });
    onEvent(stream, "remind", function (d) {
      var item = document.getElementById("req-" + d.id);
      if (item) item.classList.add("reminded");
    });
  }

  var request = document.getElementById("request");
  if (request && request.dataset.stream) {
    var watch = new EventSource(request.dataset.stream);
    onEvent(watch, "gone", function (d) {
      if (d.id !== request.dataset.id) return;
      var form = request.querySelector("form.answer");
      if (!form) return;
      var note = document.getElementById("gone");
      note.textContent = "No longer waiting for an answer: " + d.reason + ".";
      note.hidden = false;
      form.querySelectorAll("input, textarea, button").forEach(function (el) { el.disabled = true; });
      watch.close();
    });
  }
})();

// The dashboard: its body fetched again every two seconds.
(function () {
  var fleet = document.getElementById("fleet");
  if (!fleet || !fleet.dataset.refresh) return;
  var live = document.getElementById("live");
  setInterval(function () {
    fetch(fleet.dataset.refresh, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        fleet.replaceChildren(document.createRange().createContextualFragment(html));
        live.dataset.state = "live"; live.textContent = "live";
      })
      .catch(function () { live.dataset.state = "reconnecting"; live.textContent = "reconnecting…"; });
  }, 2000);
})();
