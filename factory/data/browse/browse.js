"use strict";
// The browse page of a kernel-wheel-factory index: reads browse.json (written beside this file
// by `factory index`) and, per package, browse/<project>.json; draws each package's torch x
// CUDA coverage, and turns a choice of package, torch and CUDA into the install commands for
// that pair's own index.

const state = { data: null, projects: {}, package: null, torch: null, cuda: null };
const $ = (id) => document.getElementById(id);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function baseUrl() {
  return new URL(".", window.location.href).href;
}

function findPackage(project) {
  return state.projects[project] || null;
}

async function loadProject(project) {
  if (!state.projects[project]) {
    const response = await fetch(`browse/${encodeURIComponent(project)}.json`, { cache: "no-cache" });
    if (!response.ok) throw new Error(`browse/${project}.json: ${response.status}`);
    state.projects[project] = await response.json();
  }
  return state.projects[project];
}

function cellFor(pkg, torch, cuda) {
  for (const release of pkg.versions) {
    const cell = release.cells.find((c) => c.torch === torch && c.cuda === cuda);
    if (cell && cell.status === "built") return { release, cell };
  }
  const newest = pkg.versions[0];
  const cell = newest ? newest.cells.find((c) => c.torch === torch && c.cuda === cuda) : null;
  return { release: newest, cell: cell || null };
}

function fillSelect(select, values, chosen) {
  select.replaceChildren(...values.map((v) => el("option", { value: v }, v)));
  if (chosen !== null && values.includes(chosen)) select.value = chosen;
  return select.value || null;
}

function readHash() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  return { package: params.get("package"), torch: params.get("torch"), cuda: params.get("cuda") };
}

function writeHash() {
  const params = new URLSearchParams();
  for (const key of ["package", "torch", "cuda"]) if (state[key]) params.set(key, state[key]);
  const hash = "#" + params.toString();
  if (window.location.hash !== hash) history.replaceState(null, "", hash);
}

function defaultsFor(pkg) {
  for (const release of pkg.versions) {
    const built = release.cells.filter((c) => c.status === "built");
    if (built.length) return { torch: built[built.length - 1].torch, cuda: built[built.length - 1].cuda };
  }
  return { torch: state.data.torch[0] || null, cuda: state.data.cuda[0] || null };
}

async function choose(selection) {
  $("paste-result").textContent = "";
  const packages = state.data.packages.map((p) => p.project);
  state.package = fillSelect($("package"), packages, selection.package || state.package);
  const pkg = state.package ? await loadProject(state.package) : null;
  const fallback = pkg ? defaultsFor(pkg) : { torch: null, cuda: null };
  state.torch = fillSelect($("torch"), state.data.torch, selection.torch || fallback.torch);
  state.cuda = fillSelect($("cuda"), state.data.cuda, selection.cuda || fallback.cuda);
  writeHash();
  renderCommands();
}

// Why a torch x CUDA pair without a record has no wheel: the build was never asked for it.
const NOT_REQUESTED = "the matrix has no such cell; its maintainers can add it, or build it on request";

function renderCommands() {
  const status = $("status");
  const pip = $("pip-command");
  const uv = $("uv-command");
  const pkg = findPackage(state.package);
  status.className = "";
  if (!pkg) {
    status.textContent = "This index holds no package yet.";
    pip.textContent = uv.textContent = "";
    $("facts").replaceChildren();
    return;
  }
  const noarch = pkg.versions.find((r) => r.anywhere.length);
  const { release, cell } = cellFor(pkg, state.torch, state.cuda);
  const label = cell && cell.status === "built" ? cell.label : null;
  if (!label && !noarch) {
    status.className = "bad";
    const why = cell ? `${cell.status}${cell.detail ? ": " + cell.detail : ""}` : `not requested: ${NOT_REQUESTED}`;
    clearCommands(`No ${pkg.name} wheel for torch ${state.torch} with CUDA ${state.cuda} (${why}).`);
    return;
  }
  const url = label ? `${baseUrl()}${label}/simple/` : `${baseUrl()}simple/`;
  const wheel = label && cell.wheels && cell.wheels.length ? cell.wheels[0] : null;
  const version = wheel ? wheel.version : label ? `${(release || noarch).version}+${label}` : noarch.version;
  status.textContent = wheel && wheel.stable_abi
    ? `${pkg.name} ${version}, a stable-ABI wheel for torch ${wheel.torch}, serves torch ${state.torch} with CUDA ${state.cuda}:`
    : label && state.cuda === "cpu"
      ? `${pkg.name} ${version}, built for torch ${state.torch} on the CPU (any build of torch ${state.torch}, with or without CUDA)${platformsOf(cell)}:`
      : label
      ? `${pkg.name} ${version}, built for torch ${state.torch} and CUDA ${state.cuda}${platformsOf(cell)}:`
      : `${pkg.name} ${version} is pure Python and works with any torch:`;
  // pinned to the labelled version: PyPI refuses local versions, so no project of the same
  // name there can answer it (uv stops at the first index with the package anyway)
  const pinned = version.includes("+") ? `${pkg.project}==${version}` : pkg.project;
  pip.textContent = `pip install ${pinned} --extra-index-url ${url}`;
  uv.textContent = `uv pip install ${pkg.project} --index ${url}`;
  showFacts(release, cell, noarch);
}

function platformsOf(cell) {
  // The machines a cell's wheels are for, where they are not one x86_64 wheel: the same index
  // serves each, and the installer takes the one of its machine.
  const platforms = [...new Set((cell.wheels || []).map((w) => w.platform).filter(Boolean))].sort().reverse();
  if (!platforms.length || (platforms.length === 1 && platforms[0] === "x86_64")) return "";
  return ` (${platforms.join(" and ")}${platforms.length > 1 ? "; the installer takes the one of your machine" : ""})`;
}

function platformText(wheel) {
  if (!wheel.platform) return "any";
  if (!wheel.cross) return wheel.platform;
  return `${wheel.platform}, cross-compiled on x86_64: imported and its CPU tests run under emulation; its GPU code is in the wheel but has not run on an ${wheel.platform} GPU`;
}

function clearCommands(message) {
  // What no longer applies goes: the commands and facts of an earlier choice.
  $("status").className = "bad";
  $("status").textContent = message;
  $("pip-command").textContent = $("uv-command").textContent = "";
  $("facts").replaceChildren();
  markSelected();
}

function showFacts(release, cell, noarch) {
  // The facts of the chosen cell's wheel, shown with its commands: what proved it and what it is.
  const facts = $("facts");
  if (cell && cell.status === "built") {
    const build = cell.cuda === "cpu" ? "CPU" : `CUDA ${cell.cuda}`;
    facts.replaceChildren(el("h3", {}, `This wheel: torch ${cell.torch}, ${build}`),
      cellProof(cell), ...(cell.wheels || []).map((w) => wheelDetails(w, release)),
      ...otherCells(cell), ...variantDetails(cell));
  } else if (noarch) {
    facts.replaceChildren(el("h3", {}, "This wheel: any torch"),
      ...noarch.anywhere.map((w) => wheelDetails(w, noarch)));
  } else {
    facts.replaceChildren();
  }
  markSelected();
}

function otherCells(cell) {
  // The label's other cells (one per CPython, a free-threaded one) that have no wheel: why.
  const others = cell.others || [];
  if (!others.length) return [];
  const list = el("ul", { class: "others" });
  for (const other of others) {
    list.append(el("li", {}, `${other.cell}: ${other.status}${other.detail ? ": " + other.detail : ""}`));
  }
  return [list];
}

function markSelected() {
  // The grid cell of the current choice is marked, in whichever package card shows it.
  for (const td of document.querySelectorAll("td.selected")) {
    td.classList.remove("selected");
    td.removeAttribute("aria-current");
  }
  if (!$("pip-command").textContent) return;
  const card = document.getElementById(`pkg-${state.package}`);
  const td = card && card.querySelector(`td[data-torch="${CSS.escape(state.torch || "")}"][data-cuda="${CSS.escape(state.cuda || "")}"]`);
  if (td) {
    td.classList.add("selected");
    td.setAttribute("aria-current", "true");
  }
}

function readPaste() {
  const text = $("paste").value.trim();
  const result = $("paste-result");
  const match = text.match(/^(\d+)\.(\d+)\S*\s+(\d+\.\d+|None)\s*$/);
  if (!text) {
    result.textContent = "";
    return;
  }
  if (!match) {
    result.textContent = "Expected something like: 2.11.0+cu130 13.0";
    return;
  }
  const torch = `${match[1]}.${match[2]}`;
  if (match[3] === "None") {
    // a CPU build of torch: the CPU cells' column, where the index has one
    if (state.data.torch.includes(torch) && state.data.cuda.includes("cpu")) {
      choose({ package: state.package, torch, cuda: "cpu" }).then(() => {
        result.textContent = `Found torch ${torch} without CUDA: the CPU builds.`;
      });
      return;
    }
    result.textContent = `torch ${torch} without CUDA: these wheels need a CUDA build of torch.`;
    clearCommands(`No wheel here for torch ${torch} without CUDA.`);
    return;
  }
  const known = state.data.torch.includes(torch) && state.data.cuda.includes(match[3]);
  result.textContent = known
    ? `Found torch ${torch} with CUDA ${match[3]}.`
    : `torch ${torch} with CUDA ${match[3]}: no index here for that pair yet.`;
  if (!known) {
    clearCommands(`No index here for torch ${torch} with CUDA ${match[3]}.`);
    return;
  }
  choose({ package: state.package, torch, cuda: match[3] }).then(() => {
    result.textContent = `Found torch ${torch} with CUDA ${match[3]}.`;
  });
}

function formatSize(bytes) {
  // Binary units, as the factory prints sizes everywhere else (40.6 KiB, 33.2 MiB, 912 bytes).
  for (const [unit, size] of [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (bytes >= size) return `${(bytes / size).toFixed(1)} ${unit}`;
  }
  return `${bytes} bytes`;
}

function gpuCode(wheel) {
  // Each kind of GPU code with its bytes in the wheel's shared objects, and inflated when the
  // driver loads it (compressed code), when the wheel's record has them.
  const sizes = wheel.gpu_code_sizes || {};
  const codes = wheel.gpu_code || [];
  if (!codes.length) return wheel.platform && wheel.platform !== "any" ? "none (a CPU build)" : "none (pure Python)";
  return codes.map((code) => {
    const size = sizes[code];
    if (!size) return code;
    return size[0] === size[1] ? `${code} ${formatSize(size[0])}` : `${code} ${formatSize(size[0])} (${formatSize(size[1])} inflated)`;
  }).join(", ");
}

function beyondCell(wheel) {
  // GPU code the project compiled for architectures its cell did not ask for (its own
  // -gencode list): what the wheel carries, and costs, beyond the cell.
  const beyond = wheel.gpu_code_beyond || [];
  if (!beyond.length) return [];
  const sizes = wheel.gpu_code_sizes || {};
  const bytes = beyond.reduce((sum, code) => sum + ((sizes[code] || [0])[0]), 0);
  const cost = bytes ? ` (${formatSize(bytes)} of the wheel's GPU code)` : "";
  return [["beyond the cell", `${beyond.join(", ")}${cost}: the project names these architectures itself`]];
}

function pythonText(wheel) {
  // The wheel's ABI tag says which CPythons load it: an abi3 wheel every CPython with the GIL
  // from its version on, a cp314t wheel only the free-threaded CPython 3.14t.
  const parts = wheel.filename.replace(/\.whl$/, "").split("-");
  const abi = parts.length >= 5 ? parts[parts.length - 2] : "";
  const requires = wheel.requires_python || "any";
  const free = /^cp(\d)(\d+)t$/.exec(abi);
  if (free) return `free-threaded CPython ${free[1]}.${free[2]}t only (${abi}): it loads with the GIL disabled`;
  if (abi === "abi3") return `${requires}, with the GIL (abi3: a free-threaded CPython needs its own cpXYt wheel)`;
  return requires;
}

function wheelDetails(wheel, release) {
  const rows = [
    ["file", el("a", { href: wheel.url }, wheel.filename)],
    ["size", wheel.installed_size ? `${formatSize(wheel.size)} (${formatSize(wheel.installed_size)} installed)` : formatSize(wheel.size)],
    // the index takes a wheel only with the bytes its build recorded when it packaged it
    ["sha256", `${wheel.sha256} (gated: taken when it was packaged, before any of its code ran)`],
    ["GPU code", gpuCode(wheel)],
    ...beyondCell(wheel),
    ["platform", platformText(wheel)],
    ["torch", wheel.torch || "any"],
    ["Python", pythonText(wheel)],
    ["uploaded", wheel.upload_time],
  ];
  if (wheel.stable_abi) {
    // One wheel for many cells: name every torch x CUDA cell whose index lists it.
    const served = release.cells.filter((c) => (c.wheels || []).some((w) => w.filename === wheel.filename));
    rows.push(["stable ABI", `built against torch's stable ABI ${wheel.stable_abi}: one wheel for torch ${wheel.torch}`]);
    rows.push(["serves", served.map((c) => `torch ${c.torch} with CUDA ${c.cuda} (${c.label})`).join(", ")]);
  }
  const source = (wheel.provenance || {}).source;
  if (source) {
    const git = source.git ? `, git ${source.git.commit.slice(0, 12)}${source.git.dirty ? " (dirty)" : ""}` : "";
    const where = `${source.kind} ${source.location}${source.subdir ? ` (${source.subdir})` : ""}${source.revision ? ` @ ${source.revision}` : ""}`;
    rows.push(["source", `${where} (tree ${String(source.tree_sha256).slice(0, 12)}${git})`]);
  }
  const tools = (wheel.provenance || {}).toolchain;
  if (tools) rows.push(["toolchain", Object.entries(tools).map(([k, v]) => `${k} ${v}`).join(", ")]);
  if (wheel.provenance && wheel.provenance.factory) rows.push(["built by", `kernel-wheel-factory ${wheel.provenance.factory}`]);
  // PEP 740: signed by the CI identity that published it (factory attest), or not at all
  rows.push(["attested", wheel.attestation
    ? el("span", {}, "signed by the publishing workflow's CI identity (PEP 740): ",
        el("a", { href: wheel.attestation }, "provenance"),
        "; check it offline with factory attest --check or doctor")
    : "no: published where no CI identity could sign it"]);
  const list = el("dl");
  for (const [name, value] of rows) list.append(el("dt", {}, name), el("dd", {}, value));
  return el("div", { class: "wheel" },
    wheel.yanked !== null && wheel.yanked !== undefined
      ? el("p", { class: "yanked" }, wheel.yanked ? `Yanked: ${wheel.yanked}` : "Yanked") : null,
    list);
}

function variantDetails(cell) {
  // The cell's wheel again as a PEP 825 variant wheel (the same binaries), in the variants index
  // of its torch release: an installer that reads variants picks the CUDA build and GPU code
  // that fit the machine from it.
  const variants = cell.variants || [];
  if (!variants.length) return [];
  const pkg = findPackage(state.package);
  const index = `${baseUrl()}${variants[0].variant.index}`;
  const list = el("dl");
  list.append(el("dt", {}, "uv"),
    el("dd", { class: "command", id: "variants-command" }, `uv pip install ${pkg.project} --index ${index} --preview-features wheel-variants`));
  for (const wheel of variants) {
    list.append(el("dt", {}, `variant ${wheel.variant.label}`),
      el("dd", {}, el("a", { href: wheel.url }, wheel.filename), el("br"), wheel.variant.properties.join(", ")));
  }
  return [el("h3", {}, `Or let the installer choose: the variants index of torch ${cell.torch}`),
    el("div", { class: "wheel variants" }, list)];
}

// proven: the kernel's own tests passed; untested: they could not run, or none did (why);
// failed: a test failed. Records made before verdicts were recorded say it by their counts.
function verdictOf(tests) {
  const reason = typeof tests.reason === "string" && tests.reason ? `: ${tests.reason}` : "";
  const verdict = ["proven", "untested", "failed"].includes(tests.verdict) ? tests.verdict
    : tests.failed || tests.errors ? "failed" : tests.passed ? "proven" : "untested";
  if (verdict === "proven") return "proven: its own tests passed";
  if (verdict === "untested") return `untested${reason || ": no test ran"}`;
  return `failed${reason}`;
}

function cellProof(cell) {
  const rows = [];
  if (cell.served_by) rows.push(["proof of", `${cell.served_by}, the stable-ABI build whose wheel this cell's index lists`]);
  const tests = cell.tests;
  if (tests) {
    rows.push(["verdict", verdictOf(tests)]);
    if (typeof tests.not_run === "string" && tests.not_run) {
      rows.push(["kernel tests", `not run: ${tests.not_run}`]);
    } else {
      const where = tests.gpus && tests.gpus.length ? `on ${[...new Set(tests.gpus)].join(", ")}` : "with no GPU (GPU tests skipped)";
      const errors = tests.errors ? `, ${tests.errors} error(s)` : "";
      const chosen = typeof tests.selection === "string" && tests.selection ? ` (chosen: ${tests.selection})` : "";
      const cases = Array.isArray(tests.cases) && tests.cases[0] < tests.cases[1]
        ? `; ${tests.cases[0]} of ${tests.cases[1]} cases${typeof tests.how === "string" && tests.how ? ` (${tests.how})` : ""}` : "";
      rows.push(["kernel tests", `${tests.passed} passed, ${tests.failed} failed${errors}, ${tests.skipped} skipped ${where}${chosen}${cases}`]);
    }
  } else {
    rows.push(["verdict", "not tested: built without its tests (factory build --test)"]);
  }
  if (cell.ops) {
    const ops = cell.ops.length ? el("ul", { class: "ops" }, ...cell.ops.map((op) =>
      el("li", {}, el("code", {}, op.name), ` (${op.keys.join(", ") || "no kernel"}): `,
        op.fake ? "torch.compile ready" : el("strong", {}, "no fake implementation: torch.compile breaks the graph here"))))
      : "none registered";
    rows.push(["ops", ops]);
  } else {
    rows.push(["ops", "not loaded"]);
  }
  const list = el("dl");
  for (const [name, value] of rows) list.append(el("dt", {}, name), el("dd", {}, value));
  return el("div", { class: "proof" }, list);
}

function grid(pkg, release) {
  const torches = [...new Set(release.cells.map((c) => c.torch))];
  const cudas = [...new Set(release.cells.map((c) => c.cuda))];
  torches.sort((a, b) => state.data.torch.indexOf(a) - state.data.torch.indexOf(b));
  cudas.sort((a, b) => state.data.cuda.indexOf(a) - state.data.cuda.indexOf(b));
  const head = el("tr", {}, el("th", { scope: "col" }, "torch \\ CUDA"),
    ...cudas.map((c) => el("th", { scope: "col" }, c)));
  const rows = torches.map((torch) => el("tr", {}, el("th", { scope: "row" }, torch),
    ...cudas.map((cuda) => {
      const cell = release.cells.find((c) => c.torch === torch && c.cuda === cuda);
      const where = { "data-torch": torch, "data-cuda": cuda };
      if (!cell) return el("td", { class: "none", ...where }, "not requested", el("small", {}, "not in the matrix"));
      if (cell.status === "built") {
        const open = () => {
          choose({ package: pkg.project, torch, cuda }).then(() => $("helper").scrollIntoView());
        };
        const stable = (cell.wheels || []).some((w) => w.stable_abi);
        return el("td", { class: stable ? "built stable" : "built", ...where },
          el("button", { type: "button", class: "cell", onclick: open,
                         "aria-label": `${pkg.name} for torch ${torch}, CUDA ${cuda}: install command and facts` }, "built"),
          el("small", {}, stable ? `${cell.label}, stable-ABI wheel` : cell.label));
      }
      return el("td", { class: cell.status, ...where }, cell.status, el("small", {}, cell.detail || ""));
    })));
  return el("div", { class: "grid-wrap" },
    el("table", { class: "grid" }, el("thead", {}, head), el("tbody", {}, ...rows)));
}

function renderPackages() {
  const list = $("package-list");
  list.replaceChildren();
  for (const entry of state.data.packages) {
    const body = el("div", { class: "package-body" });
    const card = el("details", { class: "package", id: `pkg-${entry.project}` },
      el("summary", {}, el("h3", {}, entry.name), el("span", { class: "latest" }, entry.latest)),
      body);
    card.addEventListener("toggle", async () => {
      if (!card.open || body.dataset.drawn) return;
      body.dataset.drawn = "true";
      drawPackage(await loadProject(entry.project), body);
    });
    list.append(card);
  }
}

function drawPackage(pkg, body) {
  const versionSelect = el("select", { "aria-label": `${pkg.name} version` },
    ...pkg.versions.map((r) => el("option", { value: r.version }, r.version)));
  const content = el("div");
  const draw = () => {
    const release = pkg.versions.find((r) => r.version === versionSelect.value);
    const parts = [];
    if (release.cells.length) parts.push(grid(pkg, release));
    for (const wheel of release.anywhere) parts.push(wheelDetails(wheel, release));
    content.replaceChildren(...parts);
    markSelected();
  };
  versionSelect.addEventListener("change", draw);
  body.replaceChildren(el("label", { class: "version" }, "version ", versionSelect), content);
  draw();
}

function openPackage(project) {
  const card = document.getElementById(`pkg-${project}`);
  if (card && !card.open) card.open = true;
}

function copyButtons() {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", async () => {
      const text = $(button.dataset.copy).textContent;
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch (error) {
        button.textContent = "Select and copy";
      }
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
  }
}

async function main() {
  const response = await fetch("browse.json", { cache: "no-cache" });
  state.data = await response.json();
  $("generator").textContent = `Made by ${state.data.generator}.`;
  renderPackages();
  for (const id of ["package", "torch", "cuda"]) {
    $(id).addEventListener("change", () => choose({
      package: $("package").value, torch: $("torch").value, cuda: $("cuda").value }));
  }
  $("paste").addEventListener("input", readPaste);
  window.addEventListener("hashchange", () => choose(readHash()).then(() => openPackage(state.package)));
  copyButtons();
  await choose(readHash());
  if (state.package) openPackage(state.package);
  document.body.dataset.ready = "true";
}

main().catch((error) => {
  $("status").className = "bad";
  $("status").textContent = `Could not load browse.json: ${error}`;
});
