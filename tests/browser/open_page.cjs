// What every browser script starts with: headless Chromium on the debug
// chat page of a running `harness-bridge serve`, the API token entered and
// the harness, conversation and actor picked, as an operator would.
// Console errors are collected in `out.console_errors`, the page's
// response headers in `out.page_headers`, and what the page left in
// localStorage and sessionStorage at the end in `out.storage`.
//
// Environment: PLAYWRIGHT_CORE (path of the playwright-core package),
// CHROMIUM (the browser), URL (the page), TOKEN (the API token),
// CONVERSATION, HARNESS.
"use strict";
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const WAIT = { timeout: 120000 };

// Headless Chromium, kept off every network but loopback.
function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    // This machine has no network but loopback: keep Chromium from trying.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

// The page's console errors go to `out.console_errors`.
function watchErrors(page, out) {
  page.on("console", (m) => { if (m.type() === "error") out.console_errors.push(m.text()); });
  page.on("pageerror", (e) => out.console_errors.push(String(e)));
}

async function openPage(out) {
  const browser = await launch();
  const page = await browser.newPage();
  watchErrors(page, out);
  const response = await page.goto(process.env.URL);
  out.page_headers = response.headers();
  // The page asks for the API token (serve keeps it in STORE/api-token).
  await page.fill("#token", process.env.TOKEN);
  await page.dispatchEvent("#token", "change");
  await page.waitForFunction((h) => [...document.querySelectorAll("#harness option")].some((o) => o.value === h),
    process.env.HARNESS, WAIT);
  await page.selectOption("#harness", process.env.HARNESS);
  await page.fill("#conversation", process.env.CONVERSATION);
  await page.fill("#actor", "alice");
  return { browser, page };
}

// Run `drive(page, out)` on an opened page; print `out` as one JSON line.
async function session(drive) {
  const out = { console_errors: [] };
  const { browser, page } = await openPage(out);
  try {
    await drive(page, out);
    // What the page left in the browser's storage.
    out.storage = await page.evaluate(() => ({ local: { ...localStorage }, session: { ...sessionStorage } }));
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

// What the page shows now, cards included.
function snapshot(page) {
  return page.evaluate(() => {
    const pointer = {};
    for (const dd of document.querySelectorAll("#pointer dd")) pointer[dd.dataset.key] = dd.textContent;
    const cards = [...document.querySelectorAll(".card")].map((c) => ({
      interaction_id: c.dataset.interaction,
      title: c.querySelector("h3").textContent,
      buttons: [...c.querySelectorAll("button")].map((b) => ({ label: b.textContent, style: b.className, disabled: b.disabled })),
      expiry: (c.querySelector(".expiry") || {}).textContent || null,
      outcome: (c.querySelector(".outcome") || {}).textContent || null,
    }));
    return {
      // This session's messages; the conversation's stored ones, shown
      // when it was opened, apart.
      user: [...document.querySelectorAll(".user:not(.earlier)")].map((e) => e.textContent),
      assistant: [...document.querySelectorAll(".assistant:not(.earlier)")].map((e) => e.textContent),
      earlier: [...document.querySelectorAll(".earlier")].map((e) => e.textContent),
      events: [...document.querySelectorAll(".event")].map((e) => e.textContent),
      project: [...document.querySelectorAll(".project")].map((e) => e.textContent),
      files: [...document.querySelectorAll("details.file")].map((f) => ({
        about: f.querySelector("summary").textContent,
        text: f.querySelector("pre").textContent,
      })),
      cards,
      session_id: document.querySelector("#session-id").textContent,
      resumed: document.querySelector("#resumed").textContent,
      process: document.querySelector("#process").textContent,
      status: document.querySelector("#status").textContent,
      run_id: document.querySelector("#run-id").textContent,
      pointer,
    };
  });
}

module.exports = { session, snapshot, launch, watchErrors, WAIT };
