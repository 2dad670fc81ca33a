// Drives the debug chat page of a running `harness-bridge serve` in headless
// Chromium, as an operator would: pick the harness, conversation and actor,
// send a message, watch the reply stream in, send a second one. Prints what
// the page showed as one JSON object; the Rust test (tests/serve_browser.rs)
// judges it.
//
// Environment: PLAYWRIGHT_CORE (path of the playwright-core package),
// CHROMIUM (the browser), URL (the page), TOKEN (the API token),
// CONVERSATION, HARNESS, FIRST,
// SECOND, THIRD (the messages; THIRD optional), STREAMED (text that must show while the run is
// still going), SCREENSHOTS (a folder).
"use strict";
const { session, snapshot, WAIT } = require("./open_page.cjs");

async function drive(page, out) {
  // First message, sent with the button.
  await page.fill("#message", process.env.FIRST);
  await page.click("#send");
  await page.waitForFunction((t) => [...document.querySelectorAll(".assistant")].some((b) => b.textContent.includes(t)),
    process.env.STREAMED, WAIT);
  out.status_when_streamed = await page.textContent("#status");
  await page.waitForFunction(() => document.querySelector("#status").textContent === "completed"
    && !document.querySelector("#send").disabled, null, WAIT);
  out.first = await snapshot(page);
  await page.screenshot({ path: process.env.SCREENSHOTS + "/first.png" });

  // Second message, sent with Enter.
  await page.fill("#message", process.env.SECOND);
  await page.press("#message", "Enter");
  await page.waitForFunction(() => document.querySelectorAll(".assistant").length === 2
    && document.querySelector("#status").textContent === "completed"
    && !document.querySelector("#send").disabled, null, WAIT);
  out.second = await snapshot(page);
  await page.screenshot({ path: process.env.SCREENSHOTS + "/second.png" });

  // A chat command, answered by the bridge.
  if (process.env.THIRD) {
    await page.fill("#message", process.env.THIRD);
    await page.press("#message", "Enter");
    await page.waitForFunction(() => document.querySelectorAll(".assistant").length === 3
      && document.querySelector("#status").textContent === "completed"
      && !document.querySelector("#send").disabled, null, WAIT);
    out.third = await snapshot(page);
  }
}

session(drive).catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
