// Drives the debug chat page of a running `harness-bridge serve` through a
// card: send a message that makes the agent ask (a question, an approval),
// see the card it sends, press one of its buttons, and see the answer's
// turn go on. Prints what the page showed as one JSON object; the Rust
// test (tests/serve_browser.rs) judges it.
//
// Environment: PLAYWRIGHT_CORE, CHROMIUM, URL, TOKEN, CONVERSATION, HARNESS
// (as chat_page.cjs), FIRST (the message), PRESS (the text of the button to
// press), EXPECT (text the answer's reply shows), SCREENSHOTS (a folder).
"use strict";
const { session, snapshot, WAIT } = require("./open_page.cjs");

async function drive(page, out) {
  await page.fill("#message", process.env.FIRST);
  await page.click("#send");
  await page.waitForSelector(".card", WAIT);
  await page.waitForFunction(() => !document.querySelector("#send").disabled, null, WAIT);
  out.asked = await snapshot(page);
  await page.screenshot({ path: process.env.SCREENSHOTS + "/card.png" });

  // The person presses a button of the card: the answer is a new turn.
  await page.click(".card button >> text=" + JSON.stringify(process.env.PRESS));
  await page.waitForFunction((t) => [...document.querySelectorAll(".assistant")].some((b) => b.textContent.includes(t))
    && document.querySelector("#status").textContent === "completed"
    && !document.querySelector("#send").disabled, process.env.EXPECT, WAIT);
  out.answered = await snapshot(page);
  await page.screenshot({ path: process.env.SCREENSHOTS + "/answered.png" });
}

session(drive).catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
