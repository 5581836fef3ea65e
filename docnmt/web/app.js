// The docnmt web page: paste or drop a document, translate it with POST /v1/translate (text) or
// POST /v1/translate/file (a file, answered as JSON with the translated file in `file`), show
// source and translation side by side. No external assets: it works without a network.
"use strict";

const $ = (id) => document.getElementById(id);
const form = $("form"), statusLine = $("status"), source = $("source"), drop = $("drop");
let chosenFile = null;   // a File to translate instead of the text box
let download = null;     // {name, text, type} of the last result

function say(message, isError = false) {
  statusLine.textContent = message;
  statusLine.classList.toggle("error", isError);
}

function headers(extra = {}) {
  const key = $("apikey").value;
  return key ? { ...extra, "X-API-Key": key } : extra;
}

async function call(path, init = {}) {
  const response = await fetch(path, { ...init, headers: headers(init.headers || {}) });
  let body;
  try {
    body = await response.json();
  } catch {
    body = { error: `${response.status} ${response.statusText}` };
  }
  if (!response.ok) {
    const retry = response.headers.get("Retry-After");
    throw new Error((body.error || response.statusText) + (retry ? ` (retry in ${retry} s)` : ""));
  }
  return body;
}

async function loadModels() {
  const health = await call("/healthz");
  $("key-label").hidden = !health.api_key_required;
  if (health.api_key_required && !$("apikey").value) {
    say("This server needs an API key: enter it, then press Enter or Translate.");
    return;
  }
  const { models } = await call("/v1/models");
  const select = $("model");
  select.replaceChildren(...models.map((m) => {
    const option = new Option(`${m.name} (${m.method}, ${m.mode})`, m.name);
    option.dataset.beam = m.decode.beam;
    option.dataset.lenpen = m.decode.lenpen;
    return option;
  }));
  showDefaults();
  say(`${models.length} model${models.length === 1 ? "" : "s"} ready.`);
}

function showDefaults() {
  const option = $("model").selectedOptions[0];
  if (option) {
    $("beam").placeholder = option.dataset.beam;
    $("lenpen").placeholder = option.dataset.lenpen;
  }
}

function options() {
  const out = {};
  if ($("beam").value) out.beam = parseInt($("beam").value, 10);
  if ($("lenpen").value) out.lenpen = parseFloat($("lenpen").value);
  if ($("sliding").checked) out.sliding = true;
  return out;
}

function chooseFile(file) {
  chosenFile = file;
  $("filename").textContent = file ? `${file.name} (${file.size} bytes) will be translated` : "";
  $("clear-file").hidden = !file;
  source.disabled = !!file;
}

async function translate() {
  const button = $("translate");
  button.disabled = true;
  try {
    if (!$("model").value) {           // an API key typed but not confirmed yet: the models come first
      await loadModels();
      if (!$("model").value) throw new Error("No model to translate with yet: enter the API key.");
    }
    say("Translating…");
    let result;
    if (chosenFile) {
      const data = new FormData();
      data.append("file", chosenFile);
      data.append("model", $("model").value);
      data.append("options", JSON.stringify(options()));
      data.append("response", "json");
      data.append("lang", $("lang").value || "en");
      // a .txt file with "found by a sentence splitter": paragraphs split into sentences, written back whole
      if (/\.txt$/i.test(chosenFile.name) && $("split").value === "sentences") data.append("format", "text");
      result = await call("/v1/translate/file", { method: "POST", body: data });
      download = { name: result.filename, text: result.file, type: result.media_type || "text/plain",
                   binary: result.encoding === "base64" };
      if (download.binary) {       // Copy gives the translated sentences, Download the file
        download.copy = result.documents.flatMap((d) => d.sentences.map((r) => r.translation)).join("\n") + "\n";
      }
    } else {
      if (!source.value.trim()) throw new Error("Paste a document first, or choose a file.");
      result = await call("/v1/translate", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: $("model").value, text: source.value, split: $("split").value,
                               lang: $("lang").value || "en", options: options() }),
      });
      download = { name: "translation.txt", text: result.text + "\n", type: "text/plain" };
    }
    show(result);
    say(`Translated ${result.coverage.sentences} sentence${result.coverage.sentences === 1 ? "" : "s"} in ${(result.timing.total_ms / 1000).toFixed(1)} s.`);
  } catch (e) {
    $("result").hidden = true;       // never an earlier translation under this error
    download = null;
    say(e.message, true);
  } finally {
    button.disabled = false;
  }
}

function show(result) {
  const rows = result.sentences
    ? result.sentences.map((s) => ({ ...s, doc: null }))
    : result.documents.flatMap((d) => d.sentences.map((s, k) => ({ ...s, doc: d.id, first: k === 0 })));
  const body = $("pairs").tBodies[0];
  body.replaceChildren(...rows.map((r, k) => {
    const tr = document.createElement("tr");
    const newBlock = k > 0 && (r.first || (r.paragraph !== undefined && r.paragraph !== rows[k - 1].paragraph));
    tr.className = (r.empty ? "empty " : "") + (newBlock ? "paragraph-start" : "");
    for (const [text, cls] of [[k + 1, "n"], [r.source, "source"], [r.translation || "(empty)", "translation"],
                               [r.score === null ? "–" : r.score.toFixed(2), "score"]]) {
      const td = document.createElement("td");
      td.textContent = text;
      td.className = cls;
      tr.appendChild(td);
    }
    return tr;
  }));
  const warnings = [];
  const c = result.coverage;
  if (c.empty_sentences) warnings.push(`${c.empty_sentences} of ${c.sentences} sentences came back empty.`);
  if (c.documents_fully_recovered < c.documents) {
    warnings.push(`${c.documents - c.documents_fully_recovered} of ${c.documents} documents were not fully ` +
                  "recovered: some of their sentences came back empty or merged (repaired by the recovery rules).");
  }
  if (c.repaired_sentences) {
    warnings.push(`${c.repaired_sentences} sentence${c.repaired_sentences === 1 ? "" : "s"} the model lost ` +
                  "(empty or merged) were translated again alone.");
  }
  $("warnings").replaceChildren(...warnings.map((w) => {
    const p = document.createElement("p");
    p.className = "warning";
    p.textContent = w;
    return p;
  }));
  if (result.sentences) editable(body, rows, result);
  const t = result.timing;
  $("timing").textContent = `waited ${t.queued_ms} ms, ${t.total_ms} ms in all, ${t.source_tokens} source tokens`;
  $("result").hidden = false;
}

// Editing a translation: each translated sentence of a text result can be edited in place; an
// edited one gets a button that translates the sentences after it again, with every sentence up
// to it and its (edited) translation as the forced context (the API's `context`).
function editable(body, rows, result) {
  const request = { model: $("model").value, options: options(), split: result.split ? result.split.by : "lines" };
  [...body.rows].forEach((tr, k) => {
    const cell = tr.cells[2];
    cell.contentEditable = "true";
    cell.setAttribute("aria-label", `translation of sentence ${k + 1} (editable)`);
    cell.addEventListener("focus", () => { if (!rows[k].translation) cell.textContent = ""; });
    const redo = document.createElement("button");
    redo.type = "button";
    redo.className = "retranslate";
    redo.textContent = "Re-translate the rest";
    redo.title = "translate the sentences after this one again, with your edits as their context";
    redo.hidden = true;
    cell.addEventListener("input", () => {
      rows[k].translation = cell.textContent.trim();
      redo.hidden = k === rows.length - 1;
    });
    redo.addEventListener("click", () => retranslateAfter(k, body, rows, request));
    const td = document.createElement("td");
    td.className = "edit";
    td.appendChild(redo);
    tr.appendChild(td);
  });
}

async function retranslateAfter(k, body, rows, request) {
  const buttons = body.querySelectorAll("button.retranslate");
  buttons.forEach((b) => { b.disabled = true; });
  try {
    say("Translating the rest with your edits as context…");
    const context = { src: rows.slice(0, k + 1).map((r) => r.source),
                      tgt: rows.slice(0, k + 1).map((r) => r.translation) };
    const result = await call("/v1/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: request.model, sentences: rows.slice(k + 1).map((r) => r.source), context,
                             options: request.options }),
    });
    result.sentences.forEach((s, j) => {
      const row = rows[k + 1 + j], tr = body.rows[k + 1 + j];
      row.translation = s.translation;
      tr.cells[2].textContent = s.translation || "(empty)";
      tr.cells[3].textContent = s.score === null ? "–" : s.score.toFixed(2);
      tr.classList.toggle("empty", s.empty);
      tr.cells[4].firstChild.hidden = true;
    });
    body.rows[k].cells[4].firstChild.hidden = true;
    download = { name: "translation.txt", text: joinText(rows, request.split) + "\n", type: "text/plain" };
    say(`Translated ${result.sentences.length} sentence${result.sentences.length === 1 ? "" : "s"} after ` +
        `sentence ${k + 1} again, with your edits as context.`);
  } catch (e) {
    say(e.message, true);
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

function joinText(rows, split) {      // as the server's join_text: paragraphs apart, sentences joined
  const paragraphs = [];
  rows.forEach((r, k) => {
    if (k === 0 || r.paragraph !== rows[k - 1].paragraph) paragraphs.push([]);
    paragraphs[paragraphs.length - 1].push(r.translation);
  });
  return paragraphs.map((p) => (split === "sentences" ? p.filter((t) => t).join(" ") : p.join("\n"))).join("\n\n");
}

async function copyTranslation() {
  if (!download) return;
  try {
    await navigator.clipboard.writeText(download.copy ?? download.text);
  } catch {              // no clipboard permission (plain http, headless): copy through a selection
    const area = document.createElement("textarea");
    area.value = download.copy ?? download.text;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  say("Translation copied.");
}

function saveTranslation() {
  if (!download) return;
  const body = download.binary ? Uint8Array.from(atob(download.text), (c) => c.charCodeAt(0)) : download.text;
  const url = URL.createObjectURL(new Blob([body], { type: download.type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = download.name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  say(`Saved ${download.name}.`);
}

form.addEventListener("submit", (e) => { e.preventDefault(); translate(); });
form.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); translate(); }
});
$("model").addEventListener("change", showDefaults);
$("file").addEventListener("change", () => chooseFile($("file").files[0] || null));
$("clear-file").addEventListener("click", () => { $("file").value = ""; chooseFile(null); source.focus(); });
$("apikey").addEventListener("keydown", (e) => {
  if (e.key === "Enter") { e.preventDefault(); loadModels().catch((err) => say(err.message, true)); }
});
$("apikey").addEventListener("change", () => loadModels().catch((err) => say(err.message, true)));
$("copy").addEventListener("click", copyTranslation);
$("download").addEventListener("click", saveTranslation);
for (const name of ["dragenter", "dragover"]) {
  drop.addEventListener(name, (e) => { e.preventDefault(); drop.classList.add("over"); });
}
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files.length) chooseFile(e.dataTransfer.files[0]);
});

loadModels().catch((err) => say(err.message, true));
