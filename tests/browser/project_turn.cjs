// Drives the debug chat page of a running `harness-bridge serve` whose
// binding works on a project: send one message, wait for the turn to end,
// and print what the page showed (the reply, the bridge's summary of the
// turn's changes, the diff file) as one JSON object; the Rust test
// (tests/serve_browser.rs) judges it.
//
// Environment: PLAYWRIGHT_CORE, CHROMIUM, URL, TOKEN, CONVERSATION, HARNESS
// (as chat_page.cjs), FIRST (the message), SCREENSHOTS (a folder).
"use strict";
const { session, snapshot, WAIT } = require("./open_page.cjs");

async function drive(page, out) {
  await page.fill("#message", process.env.FIRST);
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#status").textContent === "completed"
    && !document.querySelector("#send").disabled, null, WAIT);
  // The diff opens where the person clicks it.
  await page.click("details.file summary");
  out.turn = await snapshot(page);
  out.diff_open = await page.evaluate(() => document.querySelector("details.file").open);
  await page.screenshot({ path: process.env.SCREENSHOTS + "/project.png" });
}

session(drive).catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
