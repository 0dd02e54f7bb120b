// The placeviz HTML report's only script (placeviz/render/report.py inlines it): pan and zoom,
// opening collapsed boxes, finding ops, and the side panel. Model strings reach the page only
// through textContent, never as HTML.
(function () {
  "use strict";
  var index = JSON.parse(document.getElementById("index").textContent);
  var input = document.getElementById("search");
  var results = document.getElementById("results");
  var where = document.getElementById("where");
  var panel = document.getElementById("panel");
  var panelBody = document.getElementById("panel-body");
  var LIMIT = 50;
  var XLINK = "http://www.w3.org/1999/xlink";

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = text; }
    if (cls) { e.className = cls; }
    return e;
  }

  function human(n) {
    if (n === null || n === undefined) { return "? B"; }
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], k = 0;
    while (n >= 1024 && k < units.length - 1) { n /= 1024; k++; }
    return (k ? n.toFixed(1) : String(n)) + " " + units[k];
  }

  // ------------------------------------------------------------------ pan and zoom
  // Each picture keeps its own offset and scale; the SVG moves by a CSS transform, so its text is
  // drawn at the SVG's own size (100 %: 10 pt) until the reader zooms.
  function state(pic) {
    if (!pic.pz) { pic.pz = {x: 0, y: 0, s: 1}; }
    return pic.pz;
  }
  function apply(pic) {
    var st = state(pic);
    var svg = pic.querySelector("svg");
    svg.style.transform = "translate(" + st.x + "px," + st.y + "px) scale(" + st.s + ")";
    pic.setAttribute("data-scale", st.s.toFixed(3));
    pic.setAttribute("data-x", String(Math.round(st.x)));
    pic.setAttribute("data-y", String(Math.round(st.y)));
  }
  function shown(box) { return box.querySelector(".pic:not([hidden])"); }
  function size(pic) {
    var svg = pic.querySelector("svg");
    return {w: svg.width.baseVal.value, h: svg.height.baseVal.value};
  }
  function zoomAt(pic, factor, px, py) {
    var st = state(pic);
    var s = Math.min(8, Math.max(0.05, st.s * factor));
    var f = s / st.s;
    st.x = px - (px - st.x) * f;
    st.y = py - (py - st.y) * f;
    st.s = s;
    apply(pic);
  }
  function fit(pic) {
    var box = pic.parentNode, sz = size(pic), st = state(pic);
    st.s = Math.min(box.clientWidth / sz.w, box.clientHeight / sz.h, 1);
    st.x = 0; st.y = 0;
    apply(pic);
  }
  function reset(pic) {
    var st = state(pic);
    st.s = 1; st.x = 0; st.y = 0;
    apply(pic);
  }
  function centerOn(pic, node) {
    var box = pic.parentNode.getBoundingClientRect(), r = node.getBoundingClientRect();
    if (!r.width) { return; }
    var st = state(pic);
    st.x += box.left + box.width / 2 - (r.left + r.width / 2);
    st.y += box.top + box.height / 2 - (r.top + r.height / 2);
    apply(pic);
  }

  var drag = null;
  function setUp(box) {
    var first = box.querySelector(".pic");
    box.style.height = Math.max(160, Math.min(window.innerHeight * 0.75, size(first).h + 12)) + "px";
    var pics = box.querySelectorAll(".pic");
    for (var k = 0; k < pics.length; k++) { apply(pics[k]); }
    box.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = box.getBoundingClientRect();
      zoomAt(shown(box), Math.exp(-ev.deltaY * 0.002), ev.clientX - r.left, ev.clientY - r.top);
    }, {passive: false});
    box.addEventListener("mousedown", function (ev) {
      if (ev.button !== 0) { return; }
      var st = state(shown(box));
      drag = {box: box, x0: ev.clientX, y0: ev.clientY, sx: st.x, sy: st.y, moved: false};
      ev.preventDefault();
    });
    box.addEventListener("click", function (ev) {
      if (box.getAttribute("data-panned") === "1") { box.removeAttribute("data-panned"); return; }
      var node = ev.target.closest ? ev.target.closest("g.node") : null;
      if (!node || !node.id || node.id.indexOf("_n") < 0) { return; }
      var sub = index.expand[node.id];
      showBox(node);
      if (sub) { open(box, sub); }
    });
  }
  window.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    var dx = ev.clientX - drag.x0, dy = ev.clientY - drag.y0;
    if (Math.abs(dx) + Math.abs(dy) > 3) { drag.moved = true; drag.box.classList.add("panning"); }
    if (!drag.moved) { return; }
    var pic = shown(drag.box), st = state(pic);
    st.x = drag.sx + dx; st.y = drag.sy + dy;
    apply(pic);
  });
  window.addEventListener("mouseup", function () {
    if (drag && drag.moved) { drag.box.setAttribute("data-panned", "1"); drag.box.classList.remove("panning"); }
    drag = null;
  });

  // ------------------------------------------------------------------ opening boxes
  // A click on a box whose inside was drawn in advance shows that picture in place; the crumbs
  // above it lead back.
  function view(box) { return box.getAttribute("data-view"); }
  function crumbs(box) {
    var bar = document.querySelector('.crumbs[data-view="' + view(box) + '"]');
    bar.textContent = "";
    var trail = [], pic = shown(box);
    while (pic) {
      trail.unshift(pic);
      var parent = pic.getAttribute("data-parent");
      if (!parent) { break; }
      var holder = document.getElementById(parent);
      pic = holder ? holder.closest(".pic") : null;
    }
    if (trail.length < 2) { return; }
    trail.forEach(function (p, k) {
      var name = p.getAttribute("data-pic");
      var b = el("button", k === 0 ? view(box) : index.titles[name], k === trail.length - 1 ? "here" : "");
      b.setAttribute("data-pic", name);
      b.addEventListener("click", function () { open(box, name); });
      bar.appendChild(b);
      if (k < trail.length - 1) { bar.appendChild(el("span", " › ")); }
    });
  }
  function open(box, name) {
    var target = box.querySelector('.pic[data-pic="' + name + '"]');
    if (!target) { return; }
    var pics = box.querySelectorAll(".pic");
    for (var k = 0; k < pics.length; k++) { pics[k].hidden = pics[k] !== target; }
    reset(target);
    box.setAttribute("data-open", name);
    crumbs(box);
  }

  // ------------------------------------------------------------------ side panel
  function members(pic, k) {
    var map = index.boxes[pic], out = [];
    if (!map) { return out; }
    if (Array.isArray(map)) {
      for (var i = 0; i < map.length; i++) { if (map[i] === k) { out.push(i); } }
    } else {
      Object.keys(map).forEach(function (i) { if (map[i] === k) { out.push(+i); } });
    }
    return out;
  }
  function transfersOf(set) {  // the transfers with exactly one end in the set
    return index.transfers.filter(function (t) { return !set[t[0]] !== !set[t[1]]; });
  }
  function transferList(rows, set) {
    var ul = el("ul", null, "transfers");
    rows.slice(0, 30).forEach(function (t) {
      var out = set[t[0]];
      var other = out ? t[1] : t[0];
      var otherName = other >= 0 ? index.names[other] : "(client)";
      ul.appendChild(el("li", (out ? "sends to " : "receives from ") + otherName + " on " + (out ? t[5] : t[4]) +
        ": " + t[3] + ", " + (t[3] === "control" ? "control" : human(t[2]))));
    });
    if (rows.length > 30) { ul.appendChild(el("li", "… " + (rows.length - 30) + " more")); }
    return ul;
  }
  function openPanel(title) {
    panelBody.textContent = "";
    panelBody.appendChild(el("h3", title));
    panel.hidden = false;
  }
  function why(i) {
    var text = index.explain[i];
    panelBody.appendChild(el("h4", "Why it landed there"));
    panelBody.appendChild(el("pre", text || ("not in this report: " + index.explainHint.replace("NAME", index.names[i])),
                             "why"));
  }
  function showOp(i) {
    openPanel(index.names[i]);
    panelBody.appendChild(el("p", index.ops[index.op[i]] + " on " + index.devices[index.dev[i]], "device"));
    why(i);
    // A variable sends through its own scope (hid_w/read): the op's scope counts as the op.
    var set = {}, prefix = index.names[i] + "/", scoped = 0;
    set[i] = true;
    for (var k = 0; k < index.names.length; k++) {
      if (index.names[k].indexOf(prefix) === 0) { set[k] = true; scoped++; }
    }
    var rows = transfersOf(set);
    panelBody.appendChild(el("h4", "Transfers per step (" + rows.length + (scoped ? ", with " + prefix + "…" : "") + ")"));
    if (rows.length) { panelBody.appendChild(transferList(rows, set)); }
    else { panelBody.appendChild(el("p", "none: nothing it reads or writes crosses devices in one step")); }
  }
  function showBox(node) {
    var id = node.id, cut = id.lastIndexOf("_n"), pic = id.slice(0, cut), k = +id.slice(cut + 2);
    var ops = members(pic, k);
    if (ops.length === 1) { showOp(ops[0]); return; }
    var a = node.querySelector("a"), tip = a ? a.getAttributeNS(XLINK, "title") : "";
    var title = node.querySelector("title");
    openPanel(tip || (title ? title.textContent : id));
    var devs = {};
    ops.forEach(function (i) { devs[index.devices[index.dev[i]]] = true; });
    panelBody.appendChild(el("p", ops.length + " ops on " + Object.keys(devs).join(", "), "device"));
    if (index.expand[id]) { panelBody.appendChild(el("p", "opened: " + index.titles[index.expand[id]], "opened")); }
    var set = {};
    ops.forEach(function (i) { set[i] = true; });
    var rows = transfersOf(set);
    panelBody.appendChild(el("h4", "Transfers per step (" + rows.length + ")"));
    if (rows.length) { panelBody.appendChild(transferList(rows, set)); }
    panelBody.appendChild(el("h4", "Ops (click one for why it landed there)"));
    var ul = el("ul", null, "members");
    ops.slice(0, 40).forEach(function (i) {
      var li = el("li", index.names[i] + " (" + index.ops[index.op[i]] + ")");
      li.setAttribute("data-i", String(i));
      ul.appendChild(li);
    });
    if (ops.length > 40) { ul.appendChild(el("li", "… " + (ops.length - 40) + " more (find them by name above)")); }
    panelBody.appendChild(ul);
  }
  panelBody.addEventListener("click", function (ev) {
    var i = ev.target.getAttribute && ev.target.getAttribute("data-i");
    if (i !== null && i !== undefined) { show(+i); }
  });
  document.getElementById("panel-close").addEventListener("click", function () { panel.hidden = true; });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") { panel.hidden = true; } });

  // ------------------------------------------------------------------ find
  function matcher(q) {
    if (q.length > 2 && q[0] === "/" && q[q.length - 1] === "/") {
      try { var re = new RegExp(q.slice(1, -1)); return function (s) { return re.test(s) ? 6 : -1; }; }
      catch (e) { return null; }
    }
    var lq = q.toLowerCase();
    // Rank: the name itself, its last component, a component, the start of one, anywhere.
    return function (s) {
      if (s === q) { return 0; }
      var ls = s.toLowerCase();
      var at = ls.indexOf(lq);
      if (at < 0) { return -1; }
      var base = ls.slice(ls.lastIndexOf("/") + 1);
      if (base === lq) { return 1; }
      if (base.indexOf(lq) === 0) { return 2; }
      var parts = ls.split("/");
      if (parts.indexOf(lq) >= 0) { return 3; }
      for (var k = 0; k < parts.length; k++) { if (parts[k].indexOf(lq) === 0) { return 4; } }
      return 5;
    };
  }

  function clearHits() {
    var hits = document.querySelectorAll(".hit");
    for (var k = 0; k < hits.length; k++) { hits[k].classList.remove("hit"); }
  }

  function show(i) {
    clearHits();
    var parts = [];
    var first = null;
    Object.keys(index.boxes).forEach(function (pic) {
      var box = index.boxes[pic][i];
      if (box === undefined || box < 0) { return; }
      var node = document.getElementById(pic + "_n" + box);
      if (!node) { return; }
      node.classList.add("hit");
      var holder = node.closest(".pic");
      if (holder && !holder.hidden) {
        parts.push(pic);
        centerOn(holder, node);
        if (!first) { first = holder.parentNode; }
      }
    });
    where.textContent = index.names[i] + " (" + index.ops[index.op[i]] + ") runs on " +
      index.devices[index.dev[i]] + (parts.length ? "; highlighted in: " + parts.join(", ") : "");
    if (first) { first.scrollIntoView({block: "center"}); }
    showOp(i);
  }

  function search() {
    var q = input.value.trim();
    results.textContent = "";
    if (!q) { where.textContent = ""; clearHits(); return; }
    var match = matcher(q);
    if (!match) { where.textContent = "invalid regular expression"; return; }
    var found = [];
    for (var i = 0; i < index.names.length; i++) {
      var r = match(index.names[i]);
      if (r >= 0) { found.push([r, index.names[i].length, i]); }
    }
    found.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1] || a[2] - b[2]; });
    found.slice(0, LIMIT).forEach(function (f) {
      var li = el("li", index.names[f[2]] + "  —  " + index.devices[index.dev[f[2]]]);
      li.setAttribute("data-i", String(f[2]));
      results.appendChild(li);
    });
    where.textContent = found.length ? (found.length > LIMIT ? "best " + LIMIT + " of " + found.length + " matches"
      : found.length + " match(es), best first") : "no op matches";
    if (found.length && (found[0][0] === 0 || found.length === 1)) { show(found[0][2]); }
  }

  var timer = null;
  input.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(search, 150); });
  results.addEventListener("click", function (ev) {
    var i = ev.target.getAttribute && ev.target.getAttribute("data-i");
    if (i !== null && i !== undefined) { show(+i); }
  });

  var boxes = document.querySelectorAll(".svg[data-view]");
  for (var b = 0; b < boxes.length; b++) { setUp(boxes[b]); }
  var zooms = document.querySelectorAll(".zoom button[data-z]");
  for (var z = 0; z < zooms.length; z++) {
    zooms[z].addEventListener("click", function (ev) {
      var box = ev.target.closest("section").querySelector(".svg[data-view]");
      var pic = shown(box), f = +ev.target.getAttribute("data-z");
      if (f === 0) { fit(pic); } else if (f === 1) { reset(pic); }
      else { zoomAt(pic, f, box.clientWidth / 2, box.clientHeight / 2); }
    });
  }

  function fromHash() {  // a link (#find=NAME) opens the report on one op, also after it loaded
    if (location.hash.indexOf("#find=") !== 0) { return; }
    var wanted = location.hash.slice(6);
    try { wanted = decodeURIComponent(wanted); } catch (e) { /* a malformed %-escape: search it as typed */ }
    input.value = wanted;
    search();
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.body.setAttribute("data-ready", "1");  // tests check that the script ran to the end
})();
