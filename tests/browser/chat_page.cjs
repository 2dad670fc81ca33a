// Drives the debug chat page of a running `harness-bridge serve` in headless
// Chromium, as an operator would: pick the harness, conversation and actor,
// send a message, watch the reply stream in, send a second one. Prints what
// the page showed as one JSON object; the Rust test (tests/serve_browser.rs)
// judges it.
//
// Environment: PLAYWRIGHT_CORE (path of the playwright-core package),
// CHROMIUM (the browser), URL (the page), TOKEN (the API token),
// CONVERSATION, HARNESS, FIRST,
// SECOND (the messages), STREAMED (text that must show while the run is
// still going), SCREENSHOTS (a folder).
"use strict";
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const WAIT = { timeout: 120000 };

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    // This machine has no network but loopback: keep Chromium from trying.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const out = { console_errors: [] };
  try {
    const page = await browser.newPage();
    page.on("console", (m) => { if (m.type() === "error") out.console_errors.push(m.text()); });
    page.on("pageerror", (e) => out.console_errors.push(String(e)));
    await page.goto(process.env.URL);
    // The page asks for the API token (serve keeps it in STORE/api-token).
    await page.fill("#token", process.env.TOKEN);
    await page.dispatchEvent("#token", "change");
    await page.waitForFunction((h) => [...document.querySelectorAll("#harness option")].some((o) => o.value === h),
      process.env.HARNESS, WAIT);
    await page.selectOption("#harness", process.env.HARNESS);
    await page.fill("#conversation", process.env.CONVERSATION);
    await page.fill("#actor", "alice");

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
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

// What the page shows now.
function snapshot(page) {
  return page.evaluate(() => {
    const pointer = {};
    for (const dd of document.querySelectorAll("#pointer dd")) pointer[dd.dataset.key] = dd.textContent;
    return {
      user: [...document.querySelectorAll(".user")].map((e) => e.textContent),
      assistant: [...document.querySelectorAll(".assistant")].map((e) => e.textContent),
      events: [...document.querySelectorAll(".event")].map((e) => e.textContent),
      session_id: document.querySelector("#session-id").textContent,
      resumed: document.querySelector("#resumed").textContent,
      run_id: document.querySelector("#run-id").textContent,
      pointer,
    };
  });
}

main().catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
