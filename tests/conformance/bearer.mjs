// Preloaded (`node --import`) into the MCP conformance suite's process: the
// suite takes a server URL but no request headers, and a run's MCP server
// answers nothing without the run's bearer token. Every request the suite
// sends, through `fetch` or through undici directly (its DNS rebinding
// check), goes through undici's global dispatcher: this wraps it to add
// `Authorization: Bearer $MCP_BEARER`, leaving every other header as the
// suite set it (its forged Host and Origin included).
import { createRequire } from 'node:module';

const token = process.env.MCP_BEARER;
if (!token) throw new Error('MCP_BEARER is not set');
const conformance = process.env.MCP_CONFORMANCE_MAIN;
if (!conformance) throw new Error('MCP_CONFORMANCE_MAIN is not set');
// The suite's own undici, so its `request` and this share one dispatcher.
const { getGlobalDispatcher, setGlobalDispatcher } = createRequire(conformance)('undici');

const authorization = `Bearer ${token}`;
const withToken = (dispatch) => (options, handler) => {
  const { headers } = options;
  let authorized;
  if (Array.isArray(headers) && Array.isArray(headers[0])) {
    authorized = [...headers, ['authorization', authorization]];
  } else if (Array.isArray(headers)) {
    authorized = [...headers, 'authorization', authorization];
  } else if (headers && typeof headers[Symbol.iterator] === 'function') {
    authorized = [...headers, ['authorization', authorization]];
  } else {
    authorized = { ...(headers ?? {}), authorization };
  }
  return dispatch({ ...options, headers: authorized }, handler);
};
setGlobalDispatcher(getGlobalDispatcher().compose(withToken));
