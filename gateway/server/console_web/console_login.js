// Signing in to the Dex gateway's console at the identity provider of `auth.oauth.console`: the
// OAuth 2.1 authorization code flow with PKCE (S256), run in this page as a public client (no secret
// here). The page reads the issuer's metadata (OpenID discovery, else RFC 8414), sends the person
// to its login page with a fresh `state` and `code_challenge` and `resource` = the gateway's resource
// indicator (so the token's audience is this gateway), and on the way back (/console/callback)
// checks the state against the one this tab started (single use: the pending sign-in is forgotten
// before anything else, so a replayed answer finds nothing), exchanges the code at the token
// endpoint and hands the access token to the console, which keeps it in session storage. Whether
// the gateway accepts that token (issuer, audience, approver claims) is the gateway's decision.
//
// Everything here is data: error texts from the identity provider are shown by the console with
// textContent. No value becomes markup, and the only navigation is to the metadata's
// authorization endpoint, after checking it is an http(s) URL.
"use strict";

window.DexConsoleLogin = (function () {
  const PENDING_KEY = "dex-console-oauth-pending";

  class LoginError extends Error {}

  function base64url(bytes) {
    let binary = "";
    for (const b of new Uint8Array(bytes)) binary += String.fromCharCode(b);
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function randomString(size) {
    const bytes = new Uint8Array(size);
    crypto.getRandomValues(bytes);
    return base64url(bytes);
  }

  async function challengeOf(verifier) {
    return base64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  }

  function isLoopback(host) {
    return host === "localhost" || host === "[::1]" || /^127\./.test(host);
  }

  // An endpoint of the metadata: https (http on loopback only), nothing else (never javascript:).
  function endpoint(metadata, name) {
    const value = metadata[name];
    let url;
    try { url = new URL(value); } catch (e) { throw new LoginError("the identity provider's metadata has no valid " + name); }
    if (!(url.protocol === "https:" || (url.protocol === "http:" && isLoopback(url.hostname)))) {
      throw new LoginError("the identity provider's " + name + " is not an https:// URL: " + String(value));
    }
    return url;
  }

  // OpenID Connect discovery appends to the issuer; RFC 8414 inserts before the issuer's path.
  function metadataUrls(issuer) {
    const url = new URL(issuer);
    const path = url.pathname === "/" ? "" : url.pathname.replace(/\/$/, "");
    return [issuer.replace(/\/$/, "") + "/.well-known/openid-configuration",
      url.origin + "/.well-known/oauth-authorization-server" + path];
  }

  async function discover(issuer) {
    const urls = metadataUrls(issuer);
    for (const url of urls) {
      let data;
      try {
        const response = await fetch(url, { credentials: "omit", cache: "no-store", headers: { Accept: "application/json" } });
        if (!response.ok) continue;
        data = await response.json();
      } catch (e) {
        continue;
      }
      if (!data || typeof data !== "object") continue;
      if (data.issuer !== issuer) {
        throw new LoginError("the identity provider's metadata names the issuer " + JSON.stringify(data.issuer) + ", not " + issuer);
      }
      const methods = data.code_challenge_methods_supported;
      if (Array.isArray(methods) && !methods.includes("S256")) {
        throw new LoginError("the identity provider does not offer PKCE with S256");
      }
      endpoint(data, "authorization_endpoint");
      // The page may fetch only the issuer's origin (Content-Security-Policy connect-src).
      if (endpoint(data, "token_endpoint").origin !== new URL(issuer).origin) {
        throw new LoginError("the identity provider's token endpoint " + String(data.token_endpoint) +
          " is not on the issuer's origin, which is all the console's Content-Security-Policy lets it reach");
      }
      return data;
    }
    throw new LoginError("the identity provider's metadata could not be read (" + urls.join(", ") + ")");
  }

  // What /console/settings.json says about sign-in: {issuer, client_id, scope, resource, callback_path} or null.
  async function settings() {
    try {
      const response = await fetch("/console/settings.json", { credentials: "omit", cache: "no-store" });
      if (!response.ok) return null;
      const data = await response.json();
      return data && typeof data.oauth === "object" && data.oauth ? data.oauth : null;
    } catch (e) {
      return null;
    }
  }

  function isCallback(config) {
    return Boolean(config) && location.pathname === config.callback_path;
  }

  // Sends the browser to the identity provider's login page (does not come back).
  async function start(config) {
    const metadata = await discover(config.issuer);
    const verifier = randomString(48);
    const state = randomString(32);
    const redirectUri = location.origin + config.callback_path;
    sessionStorage.setItem(PENDING_KEY, JSON.stringify({
      state, verifier, issuer: config.issuer, client_id: config.client_id, resource: config.resource,
      redirect_uri: redirectUri, token_endpoint: metadata.token_endpoint,
    }));
    const url = endpoint(metadata, "authorization_endpoint");
    const params = {
      response_type: "code", client_id: config.client_id, redirect_uri: redirectUri, scope: config.scope,
      state, code_challenge: await challengeOf(verifier), code_challenge_method: "S256", resource: config.resource,
    };
    for (const [key, value] of Object.entries(params)) url.searchParams.set(key, value);
    location.assign(url.toString());
  }

  // On /console/callback: the access token, or a LoginError saying why not.
  async function finish() {
    const query = new URLSearchParams(location.search);
    const raw = sessionStorage.getItem(PENDING_KEY);
    sessionStorage.removeItem(PENDING_KEY);  // single use: the same answer again finds nothing
    history.replaceState(null, "", "/console");  // the code leaves the address bar and the history
    let pending = null;
    try { pending = JSON.parse(raw); } catch (e) { pending = null; }
    if (!pending || typeof pending.state !== "string") {
      throw new LoginError("This sign-in answer was refused: no sign-in was started in this tab, or its answer was used already.");
    }
    if (query.get("state") !== pending.state) {
      throw new LoginError("This sign-in answer was refused: its state does not match the sign-in started in this tab.");
    }
    if (query.has("iss") && query.get("iss") !== pending.issuer) {  // RFC 9207: another issuer's answer
      throw new LoginError("This sign-in answer was refused: it comes from " + query.get("iss") + ", not " + pending.issuer + ".");
    }
    if (query.has("error")) {
      throw new LoginError("The identity provider did not sign you in: " + query.get("error") +
        (query.get("error_description") ? " (" + query.get("error_description") + ")" : ""));
    }
    const code = query.get("code");
    if (!code) throw new LoginError("The identity provider's answer has no code.");
    const form = new URLSearchParams({
      grant_type: "authorization_code", code, redirect_uri: pending.redirect_uri, client_id: pending.client_id,
      code_verifier: pending.verifier, resource: pending.resource,
    });
    let response, data;
    try {
      response = await fetch(pending.token_endpoint, {
        method: "POST", body: form, credentials: "omit", cache: "no-store", headers: { Accept: "application/json" },
      });
      data = await response.json();
    } catch (e) {
      throw new LoginError("The identity provider's token endpoint did not answer.");
    }
    if (!response.ok || !data || typeof data.access_token !== "string") {
      const error = data && typeof data === "object" ? data : {};
      throw new LoginError("The identity provider gave no token: " + String(error.error || response.status) +
        (error.error_description ? " (" + String(error.error_description) + ")" : ""));
    }
    if (String(data.token_type || "").toLowerCase() !== "bearer") {
      throw new LoginError("The identity provider gave a token that is not a bearer token.");
    }
    return data.access_token;
  }

  return { LoginError, settings, isCallback, start, finish };
})();
