// Opens the HTML audit report in headless Chromium and checks it against
// the JSON audit of the same objects: the totals, the GPUs per namespace,
// the costs, the GPU nodes and pools, the top offenders, the bars of every
// chart, the policy sections, the capacity table, and GPU efficiency (first
// on the page) with right-sizing. The
// page must load with no console error and no network request. Saves a
// full-page screenshot, and with --docs PATH the top of the page as the
// README's picture.
//
//   node report.mjs REPORT.html REPORT.json SCREENSHOT.png [--docs PATH]
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const docsAt = args.indexOf("--docs");
const docs = docsAt >= 0 ? args.splice(docsAt, 2)[1] : null;
const [htmlPath, jsonPath, screenshot] = args;
if (!htmlPath || !jsonPath || !screenshot) {
  console.error("usage: node report.mjs REPORT.html REPORT.json SCREENSHOT.png [--docs PATH]");
  process.exit(2);
}
const report = JSON.parse(readFileSync(jsonPath, "utf8"));
const pageUrl = pathToFileURL(resolve(htmlPath)).href;

const failures = [];
const check = (ok, what) => {
  if (!ok) failures.push(what);
};
const eq = (got, want, what) =>
  check(JSON.stringify(got) === JSON.stringify(want), `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);

// What the page should show, worked out from the JSON report.
const objectKey = (f) => JSON.stringify([f.kind, f.namespace ?? null, f.name]);
const capacityKeys = new Set(report.capacity.map(objectKey));
const objects = new Map(); // key -> {gpus, policies: Set, capacity}
for (const f of report.findings) {
  const key = objectKey(f);
  if (!objects.has(key)) objects.set(key, { gpus: f.gpus, policies: new Set(), capacity: capacityKeys.has(key), finding: f });
  objects.get(key).policies.add(f.policy);
}
const perPolicy = new Map(); // policy -> {objects, gpus, capacityGpus, findings}
for (const f of report.findings) {
  if (!perPolicy.has(f.policy)) perPolicy.set(f.policy, { seen: new Set(), objects: 0, gpus: 0, workloadGpus: 0, capacityGpus: 0, findings: 0 });
  const p = perPolicy.get(f.policy);
  p.findings += 1;
  const key = objectKey(f);
  if (p.seen.has(key)) continue;
  p.seen.add(key);
  p.objects += 1;
  p.gpus += f.gpus;
  if (capacityKeys.has(key)) p.capacityGpus += f.gpus;
  else p.workloadGpus += f.gpus;
}
const perNamespace = new Map();
for (const [key, o] of objects) {
  if (o.capacity) continue;
  const ns = o.finding.namespace ?? "(cluster)";
  perNamespace.set(ns, (perNamespace.get(ns) ?? 0) + o.gpus);
}
const perKind = new Map();
for (const c of report.capacity) perKind.set(c.kind, (perKind.get(c.kind) ?? 0) + (c.gpus ?? 0));
const bars = (map) =>
  Object.fromEntries([...map].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)));
const expectedCharts = {
  "chart-policy": bars(new Map([...perPolicy].map(([k, p]) => [k, p.workloadGpus]))),
  "chart-namespace": bars(perNamespace),
  "chart-capacity": bars(new Map([...perPolicy].map(([k, p]) => [k, p.capacityGpus]))),
  "chart-capacity-kind": bars(perKind),
};

const userDataDir = mkdtempSync(join(tmpdir(), "report-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const requests = [];
  const consoleErrors = [];
  page.on("request", (r) => {
    if (r.url() !== pageUrl) requests.push(r.url());
  });
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  // Anything but the page itself would be a fetch from an offline cluster's browser.
  await page.route("**/*", (route) => (route.request().url() === pageUrl ? route.continue() : route.abort()));
  const response = await page.goto(pageUrl, { waitUntil: "load" });
  check(response === null || response.ok(), "the page loads");

  // Totals.
  const total = async (id) => {
    const el = page.locator(`#total-${id}`);
    return { value: await el.getAttribute("data-value"), text: (await el.textContent()).trim() };
  };
  for (const [id, want] of [
    ["gpus-held", report.gpusHeld],
    ["gpus-pending", report.gpusPending],
    ["gpus-in-violation", report.gpusInViolation],
    ["capacity-gpus", report.capacityGpus],
    ["findings", report.findings.length],
    ["evaluated", report.evaluated],
  ]) {
    const got = await total(id);
    eq(Number(got.value), want, `#total-${id} data-value`);
    eq(Number(got.text.replaceAll(",", "")), want, `#total-${id} text`);
  }
  eq(Number((await total("objects")).value), report.objects, "#total-objects");
  eq(Number((await total("capacity-gpus-in-violation")).value), report.capacityGpusInViolation, "#total-capacity-gpus-in-violation");
  const share = report.gpusHeld > 0 ? report.gpusInViolation / report.gpusHeld : 0;
  const shown = await total("waste-share");
  check(Math.abs(Number(shown.value) - share) < 1e-6, `waste share ${shown.value} is ${share}`);
  eq(shown.text.replace(/\s/g, ""), `${(share * 100).toFixed(1)}%`, "waste share text");

  // Top offenders: the objects holding the most GPUs while violating something.
  const wantOffenders = [...objects.values()].filter((o) => o.gpus > 0).sort((a, b) => b.gpus - a.gpus);
  const rows = await page.locator("#top-offenders tr.offender").evaluateAll((trs) =>
    trs.map((tr) => ({
      key: JSON.stringify([tr.dataset.kind, tr.dataset.namespace || null, tr.dataset.name]),
      gpus: Number(tr.dataset.gpus),
      policies: [...tr.querySelectorAll("a.policy-name")].map((a) => a.textContent),
      links: [...tr.querySelectorAll("a.policy-name")].map((a) => a.getAttribute("href")),
    })),
  );
  eq(rows.length, Math.min(25, wantOffenders.length), "top offender rows");
  eq(rows.map((r) => r.gpus), wantOffenders.slice(0, rows.length).map((o) => o.gpus), "top offender GPUs, most first");
  for (const row of rows) {
    const want = objects.get(row.key);
    check(want !== undefined, `offender ${row.key} has findings`);
    if (!want) continue;
    eq(row.gpus, want.gpus, `offender ${row.key} GPUs`);
    eq(new Set(row.policies).size, want.policies.size, `offender ${row.key} policies`);
    for (const href of row.links) {
      check((await page.locator(href).count()) === 1, `offender link ${href} has its finding`);
    }
  }
  check(rows.length > 0, "some top offenders are shown");

  // Every chart: one bar per label with the value the JSON gives.
  const charts = await page.locator("svg.chart").evaluateAll((svgs) =>
    svgs.map((svg) => ({
      id: svg.id,
      bars: [...svg.querySelectorAll("g.bar")].map((g) => ({
        label: g.dataset.label,
        value: Number(g.dataset.value),
        width: Number(g.querySelector("rect").getAttribute("width")),
        drawn: g.querySelector("rect").getBoundingClientRect().width,
      })),
    })),
  );
  const drawn = Object.keys(expectedCharts).filter((id) => Object.keys(expectedCharts[id]).length > 0);
  eq(charts.map((c) => c.id).sort(), drawn.sort(), "charts drawn");
  for (const chart of charts) {
    // Past 12 bars, the rest are one bar "N others".
    let want = Object.entries(expectedCharts[chart.id] ?? {});
    if (want.length > 12) {
      const rest = want.splice(11);
      want.push([`${rest.length} others`, rest.reduce((a, [, v]) => a + v, 0)]);
    }
    want = Object.fromEntries(want);
    check(chart.bars.length > 0, `${chart.id} has bars`);
    eq(Object.fromEntries(chart.bars.map((b) => [b.label, b.value])), want, `${chart.id} bars`);
    // Largest first; the bar that sums the rest comes last, whatever its length.
    const ranked = chart.bars.filter((b) => !/^\d+ others$/.test(b.label));
    for (let i = 1; i < ranked.length; i++) {
      check(ranked[i].width <= ranked[i - 1].width, `${chart.id}: bar ${i} no longer than the one above`);
    }
    check(chart.bars.every((b) => b.drawn > 0), `${chart.id}: every bar is drawn`);
  }
  eq(
    (await page.locator("#chart-namespace g.bar").evaluateAll((gs) => gs.map((g) => Number(g.dataset.value)))).reduce((a, b) => a + b, 0),
    report.gpusInViolation,
    "namespace bars add up to the GPUs held by violating workloads",
  );

  // Per policy: objects, GPUs and one anchored row per finding.
  const sections = await page.locator("section.policy").evaluateAll((ss) =>
    ss.map((s) => ({
      policy: s.dataset.policy,
      objects: Number(s.dataset.objects),
      gpus: Number(s.dataset.gpus),
      rows: s.querySelectorAll("tr.finding[id^='f-']").length,
    })),
  );
  eq(sections.length, perPolicy.size, "policy sections");
  for (const s of sections) {
    const want = perPolicy.get(s.policy);
    check(want !== undefined, `policy ${s.policy} has findings`);
    if (!want) continue;
    eq([s.objects, s.gpus, s.rows], [want.objects, want.gpus, Math.min(want.findings, 1000)], `policy ${s.policy} objects, GPUs, rows`);
  }

  // GPU capacity objects.
  const capacity = await page.locator("tr.capacity").evaluateAll((trs) =>
    trs.map((tr) => JSON.stringify([tr.dataset.kind, tr.dataset.name, tr.dataset.gpus])),
  );
  eq(
    capacity.sort(),
    report.capacity.map((c) => JSON.stringify([c.kind, c.name, c.gpus === null ? "unbounded" : String(c.gpus)])).sort(),
    "capacity rows",
  );

  // GPU nodes and pools.
  const nodes = report.nodes;
  check(nodes !== undefined, "the JSON has the GPU nodes (the fixture has Nodes)");
  if (nodes) {
    for (const [id, want] of [
      ["node-gpu-nodes", nodes.gpuNodes],
      ["node-gpus-allocatable", nodes.gpusAllocatable],
      ["node-gpus-requested", nodes.gpusRequested],
      ["node-gpus-idle", nodes.gpusIdle],
    ]) {
      const got = await total(id);
      eq(Number(got.value), want, `#total-${id} data-value`);
      eq(Number(got.text.replaceAll(",", "")), want, `#total-${id} text`);
    }
    const pools = await page.locator("tr.pool").evaluateAll((trs) =>
      trs.map((tr) => [tr.dataset.pool, tr.dataset.size, tr.dataset.nodes, tr.dataset.allocatable, tr.dataset.requested, tr.dataset.idle].join(" ")),
    );
    eq(pools, nodes.pools.map((p) => [p.pool, p.size, p.gpuNodes, p.gpusAllocatable, p.gpusRequested, p.gpusIdle].join(" ")), "pool rows");
    const flagged = await page.locator("tr.node-finding").evaluateAll((trs) =>
      trs.map((tr) => [tr.dataset.rule, tr.dataset.node, tr.dataset.gpus].join(" ")),
    );
    eq(flagged, nodes.findings.slice(0, 500).map((f) => [f.rule, f.node, f.gpus].join(" ")), "node finding rows");
  }

  // Costs, with the price file the fixture is audited with.
  const money = report.money;
  check(money !== undefined, "the JSON has costs (the report is made with --prices)");
  if (money) {
    eq((await total("cost-violations")).value, money.violationsPerDay.toFixed(2), "#total-cost-violations");
    eq((await total("cost-idle-nodes")).value, money.idleNodesPerDay.toFixed(2), "#total-cost-idle-nodes");
    eq(await page.locator("#price-date").getAttribute("datetime"), money.priceDate, "the price date on the page");
    for (const [table, rows] of [["namespace", money.byNamespace], ["policy", money.byPolicy], ["pool", money.byPool]]) {
      const got = await page.locator(`tr.cost[data-table="${table}"]`).evaluateAll((trs) =>
        trs.map((tr) => [tr.dataset.name, tr.dataset.gpus, tr.dataset.perDay].join(" ")),
      );
      eq(got, rows.slice(0, 25).map((c) => [c.name, c.gpus, c.perDay.toFixed(2)].join(" ")), `cost rows by ${table}`);
    }
  }

  // GPUs per namespace: a row per namespace of the JSON, most GPUs held
  // first, with its costs at the same prices.
  const namespaces = Object.entries(report.namespaces ?? {});
  check(namespaces.length > 0, "the JSON has GPUs per namespace");
  const byHeld = ([a, x], [b, y]) => y.gpusHeld - x.gpusHeld || y.gpusPending - x.gpusPending || (a < b ? -1 : 1);
  const cost = (v) => (v === undefined ? "-" : v.toFixed(2));
  const namespaceRows = await page.locator("tr.namespace").evaluateAll((trs) =>
    trs.map((tr) => [tr.dataset.namespace, tr.dataset.held, tr.dataset.pending, tr.dataset.inViolation, tr.dataset.idle ?? "-",
      tr.dataset.allocated ?? "-", tr.dataset.used ?? "-",
      tr.dataset.violationsPerDay ?? "-", tr.dataset.idlePodsPerDay ?? "-"].join(" ")),
  );
  eq(namespaceRows, namespaces.sort(byHeld).slice(0, 1000).map(([ns, r]) =>
    [ns, r.gpusHeld, r.gpusPending, r.gpusInViolation, r.gpusIdle ?? "-",
      r.gpuSecondsAllocated?.toFixed(0) ?? "-", r.gpuSecondsUsed?.toFixed(0) ?? "-", cost(r.violationsPerDay), cost(r.idlePodsPerDay)].join(" ")), "namespace rows");
  eq(namespaces.reduce((sum, [, r]) => sum + r.gpusHeld, 0), report.gpusHeld, "the namespaces hold the GPUs held");
  check(await page.locator("#gpu-namespaces").isVisible(), "the namespace table is shown");

  // Unhealthy GPU capacity: a row per node of the JSON, its GPUs unusable.
  const unhealthy = report.nodes?.unhealthyNodes ?? [];
  check(unhealthy.length > 0, "the fixture has a node with unhealthy GPUs");
  const unhealthyRows = await page.locator("#unhealthy-nodes tr.unhealthy").evaluateAll((trs) =>
    trs.map((tr) => [tr.dataset.node, tr.dataset.pool, tr.dataset.unusable].join(" ")),
  );
  eq(unhealthyRows, unhealthy.map((n) => [n.node, n.pool, n.gpusUnusable].join(" ")), "unhealthy node rows");
  eq(await page.locator("#total-gpus-unusable").getAttribute("data-value"), String(report.nodes.gpusUnusable), "GPUs unusable");
  check(await page.locator("#unhealthy-nodes").isVisible(), "the unhealthy capacity table is shown");

  // GPU efficiency, which the page opens with, and right-sizing, with the
  // recorded utilization answer the fixture is audited with.
  const u = report.utilization;
  check(u?.efficiency !== undefined, "the JSON has GPU efficiency (the report is made with --utilization)");
  if (u?.efficiency) {
    eq(await page.locator("body > section").first().getAttribute("id"), "efficiency", "the page opens with GPU efficiency");
    check(await page.locator("#total-gpu-used-share").isVisible(), "the efficiency headline is visible");
    const e = u.efficiency;
    const fixed = (v, digits) => (v === null || v === undefined ? "" : v.toFixed(digits));
    for (const [id, want] of [
      ["gpu-used-share", fixed(e.usedPercent ?? 0, 3)],
      ["gpu-seconds-allocated", fixed(e.gpuSecondsAllocated, 0)],
      ["gpu-seconds-used", fixed(e.gpuSecondsUsed, 0)],
      ["dram-active", fixed(e.dramActivePercent ?? 0, 3)],
      ["gpu-seconds-without-data", fixed(e.gpuSecondsWithoutData, 0)],
    ]) {
      eq((await total(id)).value, want, `#total-${id} data-value`);
    }
    eq((await total("gpu-used-share")).text.replace(/\s/g, ""), `${e.usedPercent.toFixed(1)}%`, "the share used as shown");
    for (const [by, rows] of [["class", u.byClass], ["namespace", u.byNamespace], ["kind", u.byKind]]) {
      const got = await page.locator(`#efficiency-by-${by} tr.efficiency`).evaluateAll((trs) =>
        trs.map((tr) => [tr.dataset.name, tr.dataset.pods, tr.dataset.allocated, tr.dataset.used, tr.dataset.dram, tr.dataset.withoutData].join(" ")),
      );
      const want = Object.entries(rows).map(([name, r]) =>
        [name, r.pods, fixed(r.gpuSecondsAllocated, 0), fixed(r.gpuSecondsUsed, 0), fixed(r.dramActivePercent, 3), r.podsWithoutData].join(" "),
      );
      check(want.length > 0, `efficiency by ${by} has rows`);
      eq(got, want, `efficiency rows by ${by}`);
    }
    const sized = await page.locator("#right-sizing tr.right-size").evaluateAll((trs) =>
      trs.map((tr) => [tr.dataset.namespace, tr.dataset.pod, tr.dataset.choice, tr.dataset.to, tr.dataset.gpusFreed, tr.dataset.perDay].join(" ")),
    );
    check(u.rightSizing.length > 0, "the fixture has right-sizing choices");
    eq(sized, u.rightSizing.map((r) => [r.namespace, r.pod, r.choice, r.to, fixed(r.gpusFreed, 3), fixed(r.perDay, 2)].join(" ")), "right-sizing rows");
  }

  eq(consoleErrors, [], "console errors");
  eq(requests, [], "network requests");

  await page.screenshot({ path: screenshot, fullPage: true });
  if (docs) {
    // The top of the page: totals, costs, GPU nodes and pools.
    const bottom = await page.locator("#nodes").evaluate((el) => el.getBoundingClientRect().bottom + window.scrollY);
    await page.screenshot({ path: docs, fullPage: true, clip: { x: 0, y: 0, width: 1280, height: Math.min(Math.ceil(bottom) + 16, 3200) } });
  }
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}

if (failures.length > 0) {
  console.error(`report.mjs: ${failures.length} check(s) failed:`);
  for (const f of failures) console.error(`  - ${f}`);
  process.exit(1);
}
console.log(`report.mjs: ${htmlPath} checked (totals, GPUs per namespace, costs, GPU nodes and pools, top offenders, charts, policies, capacity, unhealthy GPUs, GPU efficiency and right-sizing; no console errors, no requests); screenshot ${screenshot}`);
