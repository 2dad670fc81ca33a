// Drives the console tabs of a running `harness-bridge serve` whose store
// already holds turns of two actors: the conversations list (and its
// actor filter), the runs list (and its actor filter), one conversation's
// view (history with who said what, stored state), a reload that keeps it,
// a run's view (facts, results, audit rows), usage by person and by day,
// and the live processes. Prints what the page showed as one JSON object;
// the Rust test (tests/serve_browser.rs) judges it.
//
// Environment: PLAYWRIGHT_CORE, CHROMIUM, URL, TOKEN, CONVERSATION, HARNESS
// (as chat_page.cjs), ACTOR (the second actor, to filter by),
// SCREENSHOTS (a folder).
"use strict";
const { session, WAIT } = require("./open_page.cjs");

// The rows of table `id` as arrays of cell texts, with the row's id.
const rows = (page, id) => page.evaluate((id) => [...document.querySelectorAll("#" + id + " tbody tr")]
  .map((tr) => ({ id: tr.dataset.id || null, cells: [...tr.cells].map((td) => td.textContent) })), id);
// Wait until table `id` has at least `min` rows (exactly `exact`; only
// rows whose second cell is `actor`, when given).
const waitRows = (page, id, want) => page.waitForFunction(({ id, want }) => {
  const found = [...document.querySelectorAll("#" + id + " tbody tr")].map((tr) => [...tr.cells].map((td) => td.textContent));
  return found.length >= (want.min || 1) && (want.exact == null || found.length === want.exact)
    && (want.actor == null || found.every((cells) => cells[1] === want.actor));
}, { id, want }, WAIT);

const history = (page) => page.evaluate(() => [...document.querySelectorAll("#cv-history .h-item")].map((d) => ({
  who: d.querySelector(".who").textContent, when: d.querySelector(".when").textContent, text: d.querySelector(".text").textContent,
})));
const dl = (page, selector) => page.evaluate((s) => Object.fromEntries([...document.querySelectorAll(s + " dd")]
  .map((dd) => [dd.dataset.key, dd.textContent])), selector);

async function drive(page, out) {
  const actor = process.env.ACTOR;
  // Conversations, then only the second actor's.
  await page.click("nav a[data-tab=conversations]");
  await waitRows(page, "conversations", { min: 2 });
  out.conversations = await rows(page, "conversations");
  await page.fill("#conversations-actor", actor);
  await page.dispatchEvent("#conversations-actor", "change");
  await waitRows(page, "conversations", { exact: 1 });
  out.conversations_of_actor = await rows(page, "conversations");
  await page.fill("#conversations-actor", "");
  await page.dispatchEvent("#conversations-actor", "change");
  await waitRows(page, "conversations", { min: 2 });

  // Runs, then only the second actor's.
  await page.click("nav a[data-tab=runs]");
  await waitRows(page, "runs", { min: 3 });
  out.runs = await rows(page, "runs");
  await page.fill("#runs-actor", actor);
  await page.dispatchEvent("#runs-actor", "change");
  await waitRows(page, "runs", { actor });
  out.runs_of_actor = await rows(page, "runs");
  await page.screenshot({ path: process.env.SCREENSHOTS + "/runs.png", fullPage: true });

  // One conversation, picked from the list; then the page reloaded.
  await page.click("nav a[data-tab=conversations]");
  await waitRows(page, "conversations", { min: 2 });
  await page.click("#conversations a >> text=" + JSON.stringify(process.env.CONVERSATION));
  await page.waitForSelector("#cv-history .h-item", WAIT);
  out.conversation = {
    hash: await page.evaluate(() => location.hash),
    history: await history(page),
    state: await dl(page, "#cv-state"),
    live: await page.textContent("#cv-live"),
    runs: await rows(page, "cv-runs"),
  };
  await page.screenshot({ path: process.env.SCREENSHOTS + "/conversation.png", fullPage: true });
  await page.reload();
  await page.waitForSelector("#cv-history .h-item", WAIT);
  out.reloaded = {
    hash: await page.evaluate(() => location.hash),
    shown: await page.evaluate(() => !document.querySelector("#conversation-view").hidden),
    history: await history(page),
    token_field: await page.evaluate(() => document.querySelector("#token").value.length > 0),
  };

  // The conversation's first run.
  await page.click("#cv-runs tbody tr:last-child a");
  await page.waitForFunction(() => !document.querySelector("#run-view").hidden
    && document.querySelectorAll("#rv-results tbody tr").length > 0, null, WAIT);
  out.run = {
    hash: await page.evaluate(() => location.hash),
    facts: await dl(page, "#rv-facts"),
    results: await rows(page, "rv-results"),
    audit: await rows(page, "rv-audit"),
  };
  await page.screenshot({ path: process.env.SCREENSHOTS + "/run.png", fullPage: true });

  // Usage by person and by day, with their charts.
  await page.click("nav a[data-tab=usage]");
  await waitRows(page, "usage-actors", { min: 2 });
  out.usage = {
    actors: await rows(page, "usage-actors"),
    days: await rows(page, "usage-by-day"),
    actor_bars: await page.evaluate(() => [...document.querySelectorAll("#usage-actors-chart rect")].map((r) => ({
      key: r.dataset.key, width: Number(r.getAttribute("width")) }))),
    day_bars: await page.evaluate(() => document.querySelectorAll("#usage-days-chart rect").length),
  };
  await page.screenshot({ path: process.env.SCREENSHOTS + "/usage.png", fullPage: true });

  // Live processes.
  await page.click("nav a[data-tab=live]");
  await page.waitForFunction(() => document.querySelector("#live-note").textContent !== "", null, WAIT);
  out.live = { note: await page.textContent("#live-note"), rows: await rows(page, "live") };
  await page.screenshot({ path: process.env.SCREENSHOTS + "/live.png", fullPage: true });

  // The conversation continued in the chat: its history, pointer and
  // actor there, ready to go on.
  await page.click("nav a[data-tab=conversations]");
  await waitRows(page, "conversations", { min: 2 });
  await page.click("#conversations a >> text=" + JSON.stringify(process.env.CONVERSATION));
  await page.waitForSelector("#cv-history .h-item", WAIT);
  await page.click("#cv-chat");
  await page.waitForSelector("#log .msg.earlier", WAIT);
  await page.waitForFunction(() => document.querySelectorAll("#pointer dd").length > 0, null, WAIT);
  out.continued = {
    hash: await page.evaluate(() => location.hash),
    conversation: await page.inputValue("#conversation"),
    actor: await page.inputValue("#actor"),
    log: await page.evaluate(() => [...document.querySelectorAll("#log .msg.earlier")]
      .map((d) => ({ role: d.classList.contains("user") ? "user" : "assistant", text: d.textContent }))),
    pointer: await dl(page, "#pointer"),
  };
  await page.screenshot({ path: process.env.SCREENSHOTS + "/continued.png", fullPage: true });
}

session(drive).catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
