// A real OpenID provider (panva's oidc-provider, certified) on loopback for the gateway's auth tests.
//
//   node provider.mjs CONFIG.json
//
// Prints one JSON line on stdout when it listens: {"issuer": "http://127.0.0.1:PORT"} (port 0 in the
// config picks a free port), and `listening on <issuer>` on stderr. Logs go to stderr.
// tests/support/idp.py writes the config and starts it.
//
// What the config holds (every key optional except clients/users, see tests/support/idp.py):
//   port, jwks_path (private JWKS: loaded when present, else generated and written there),
//   rotate_keys ("none" | "replace": a new key set | "prepend": a new key set ahead of the old one),
//   signing_alg (RS256 | ES256: the access tokens' JWS algorithm), access_token_ttl,
//   client_credentials_ttl, exchange_token_ttl, resource_scope (the scopes any loopback resource
//   offers), resources ({url: {scope, format: "jwt" | "opaque", ttl, alg}}), users ({id: {password,
//   groups}}), clients (oidc-provider client metadata), exchange_subject_audiences ({client_id:
//   [aud, ...]}: the subject token must have been issued to one of them for that client to exchange).
//
// Added to the provider (its documented extension points, no hand-written token endpoint):
//   * RFC 8693 token exchange as a registered grant type (only clients whose grant_types list it);
//   * a minimal login/consent interaction on oidc-provider's interaction API (/interaction/:uid),
//     checking the password in the user table;
//   * GET /test/stats: {"grants": {grant_type: successes}, "errors": {grant_type: failures}};
//     POST /test/stats/reset zeroes them.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';

import * as jose from 'jose';
import Provider, { errors } from 'oidc-provider';

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

function readConfig() {
  const path = process.argv[2] || process.env.IDP_CONFIG;
  if (!path) throw new Error('usage: node provider.mjs CONFIG.json (or IDP_CONFIG=CONFIG.json)');
  return JSON.parse(fs.readFileSync(path, 'utf8'));
}

function newKeySet() {
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  return [
    { ...rsa, kid: `rsa-${crypto.randomUUID()}`, alg: 'RS256', use: 'sig' },
    { ...ec, kid: `ec-${crypto.randomUUID()}`, alg: 'ES256', use: 'sig' },
  ];
}

// The private key set: taken from jwks_path, or generated (and written there so a restart can keep it).
function loadKeys(config) {
  const path = config.jwks_path;
  const existing = path && fs.existsSync(path) ? JSON.parse(fs.readFileSync(path, 'utf8')).keys : undefined;
  const rotate = config.rotate_keys || 'none';
  let keys;
  if (!existing || rotate === 'replace') keys = newKeySet();
  else if (rotate === 'prepend') keys = [...newKeySet(), ...existing];
  else keys = existing;
  if (path) fs.writeFileSync(path, JSON.stringify({ keys }), { mode: 0o600 });
  return keys;
}

function publicJwks(keys) {
  return {
    keys: keys.map(({ d, p, q, dp, dq, qi, ...pub }) => pub), // eslint-disable-line no-unused-vars
  };
}

function isLoopbackUrl(value) {
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && LOOPBACK.has(url.hostname);
  } catch {
    return false;
  }
}

// What a resource indicator gets: its scopes, the token format and lifetime, the signing algorithm.
function resourceServerInfo(config, indicator) {
  const declared = config.resources?.[indicator];
  if (!declared && !isLoopbackUrl(indicator)) {
    throw new errors.InvalidTarget(`unknown resource indicator: ${indicator} (only loopback URLs or configured resources)`);
  }
  const alg = declared?.alg || config.signing_alg || 'RS256';
  return {
    scope: declared?.scope ?? config.resource_scope ?? 'mcp',
    audience: indicator,
    // Only a declared TTL here: otherwise the ttl functions below choose (client credentials
    // tokens then get client_credentials_ttl, user tokens access_token_ttl).
    ...(declared?.ttl ? { accessTokenTTL: declared.ttl } : {}),
    accessTokenFormat: declared?.format || 'jwt',
    jwt: { sign: { alg } },
  };
}

function resourceScopes(config) {
  const all = [config.resource_scope ?? 'mcp', ...Object.values(config.resources || {}).map((r) => r.scope || '')];
  return all.join(' ').split(' ').filter(Boolean);
}

// The shape oidc-provider's tokens expect for `resourceServer` (its own class is not exported).
class ResourceServer {
  constructor(identifier, info) {
    Object.assign(this, info);
    this._identifier = identifier;
  }

  get scopes() { return new Set(this.scope?.split(' ')); }

  identifier() { return this._identifier; }
}

function html(title, body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${title}</title></head><body>${body}</body></html>`;
}

function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// invalid_grant whose error_description says why (oidc-provider keeps its detail out of the answer).
function invalidGrant(description) {
  const error = new errors.InvalidGrant(description);
  error.error_description = description;
  return error;
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function loginPage(uid, client, error) {
  return html('Sign in', `<h1>Sign in to ${escapeHtml(client)}</h1>${error ? `<p class="error">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${uid}/login">
<input type="text" name="login" required><input type="password" name="password" required>
<button type="submit">Sign in</button></form>`);
}

function consentPage(uid, client, details) {
  return html('Consent', `<h1>${escapeHtml(client)} asks for access</h1><pre>${escapeHtml(JSON.stringify(details))}</pre>
<form method="post" action="/interaction/${uid}/confirm"><button type="submit">Allow</button></form>
<form method="post" action="/interaction/${uid}/abort"><button type="submit">Deny</button></form>`);
}

async function main() {
  const config = readConfig();
  const users = config.users || {};
  const keys = loadKeys(config);
  const verifyKeys = jose.createLocalJWKSet(publicJwks(keys));
  const exchangeExtra = new WeakMap(); // token -> claims the exchange adds (act)
  const stats = { grants: {}, errors: {} };

  const server = http.createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port || 0, '127.0.0.1', resolve);
  });
  const issuer = `http://127.0.0.1:${server.address().port}`;

  const provider = new Provider(issuer, {
    clients: config.clients || [],
    jwks: { keys },
    cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
    claims: { openid: ['sub'], groups: ['groups'] },
    // Resource scopes too, so that a dynamically registered client may list them in its `scope`.
    scopes: [...new Set(['openid', 'offline_access', 'groups', ...resourceScopes(config)])],
    async findAccount(_ctx, sub) {
      if (!Object.hasOwn(users, sub)) return undefined;
      return {
        accountId: sub,
        async claims() { return { sub, groups: users[sub].groups || [] }; },
      };
    },
    async extraTokenClaims(_ctx, token) {
      const claims = {};
      if (token.accountId && Object.hasOwn(users, token.accountId)) {
        claims.groups = users[token.accountId].groups || [];
      }
      return { ...claims, ...exchangeExtra.get(token) };
    },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    pkce: { required: () => true },
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    ttl: {
      AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? config.access_token_ttl ?? 600,
      ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL
        ?? config.client_credentials_ttl ?? config.access_token_ttl ?? 600,
      AuthorizationCode: 60,
      DeviceCode: 600,
      IdToken: 3600,
      RefreshToken: 86400,
      Grant: 86400,
      Interaction: 600,
      Session: 86400,
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      deviceFlow: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async (_ctx, _client, oneOf) => oneOf,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, indicator) => resourceServerInfo(config, indicator),
      },
    },
  });
  provider.proxy = false;

  provider.on('grant.success', (ctx) => {
    const type = ctx.oidc.params.grant_type;
    stats.grants[type] = (stats.grants[type] || 0) + 1;
  });
  provider.on('grant.error', (ctx) => {
    const type = ctx.oidc.params?.grant_type ?? 'unknown';
    stats.errors[type] = (stats.errors[type] || 0) + 1;
  });
  provider.on('server_error', (_ctx, error) => { console.error('oidc-provider server_error:', error); });

  provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
    const { client, params } = ctx.oidc;
    if (!params.subject_token) throw new errors.InvalidRequest('missing required parameter \'subject_token\'');
    if (![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.subject_token_type)) {
      throw new errors.InvalidRequest(`unsupported subject_token_type: ${params.subject_token_type}`);
    }
    if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
      throw new errors.InvalidRequest(`unsupported requested_token_type: ${params.requested_token_type}`);
    }
    let subject;
    try {
      ({ payload: subject } = await jose.jwtVerify(params.subject_token, verifyKeys, {
        issuer, typ: 'at+jwt', algorithms: ['RS256', 'ES256'],
      }));
    } catch (error) {
      throw invalidGrant(`subject_token is invalid: ${error.code || error.message}`);
    }
    const audiences = config.exchange_subject_audiences?.[client.clientId];
    if (audiences) {
      const given = [subject.aud].flat();
      if (!given.some((aud) => audiences.includes(aud))) {
        throw invalidGrant('subject_token was not issued to an audience this client may exchange');
      }
    }
    const targets = [params.resource, params.audience].flat().filter(Boolean);
    if (targets.length !== 1) {
      throw new errors.InvalidTarget('exactly one resource (or audience) is required for token exchange');
    }
    const [target] = targets;
    const info = resourceServerInfo(config, target);
    info.accessTokenTTL = config.resources?.[target]?.ttl ?? config.exchange_token_ttl ?? 120;
    const offered = new Set(info.scope.split(' '));
    const wanted = params.scope ? params.scope.split(' ') : String(subject.scope || '').split(' ');
    const scope = wanted.filter((s) => offered.has(s)).join(' ') || undefined;

    const token = new provider.AccessToken({
      accountId: subject.sub,
      client,
      gty: 'token_exchange',
      scope,
      expiresIn: info.accessTokenTTL,
    });
    token.resourceServer = new ResourceServer(target, info);
    const act = { sub: client.clientId };
    if (subject.act) act.act = subject.act;
    exchangeExtra.set(token, { act });
    ctx.oidc.entity('AccessToken', token);
    const value = await token.save();
    ctx.body = {
      access_token: value,
      issued_token_type: ACCESS_TOKEN_TYPE,
      token_type: 'Bearer',
      expires_in: token.expiration,
      ...(scope ? { scope } : undefined),
    };
  }, ['subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'requested_token_type',
    'resource', 'audience', 'scope'], ['resource', 'audience']);

  provider.use(async (ctx, next) => {
    if (ctx.path === '/test/stats' && ctx.method === 'GET') {
      ctx.body = stats;
      return;
    }
    if (ctx.path === '/test/stats/reset' && ctx.method === 'POST') {
      stats.grants = {};
      stats.errors = {};
      ctx.status = 204;
      return;
    }
    const match = /^\/interaction\/([\w-]+)(?:\/(login|confirm|abort))?$/.exec(ctx.path);
    if (!match) {
      await next();
      return;
    }
    const [, uid, action] = match;
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (details.uid !== uid) ctx.throw(400, 'interaction mismatch');
    const clientId = details.params.client_id;
    ctx.set('cache-control', 'no-store');
    let result;
    if (!action && ctx.method === 'GET') {
      ctx.type = 'html';
      ctx.body = details.prompt.name === 'login'
        ? loginPage(uid, clientId)
        : consentPage(uid, clientId, details.prompt.details);
      return;
    }
    if (ctx.method !== 'POST') ctx.throw(405);
    if (action === 'login') {
      const form = await readForm(ctx.req);
      const login = form.get('login');
      const user = Object.hasOwn(users, login) ? users[login] : undefined;
      if (!user || user.password !== form.get('password')) {
        ctx.status = 401;
        ctx.type = 'html';
        ctx.body = loginPage(uid, clientId, 'invalid login or password');
        return;
      }
      result = { login: { accountId: login } };
    } else if (action === 'confirm') {
      if (details.prompt.name !== 'consent') ctx.throw(400, 'no consent is being asked');
      const grant = details.grantId
        ? await provider.Grant.find(details.grantId)
        : new provider.Grant({ accountId: details.session.accountId, clientId });
      const missing = details.prompt.details;
      if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
      if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
      for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
        grant.addResourceScope(indicator, scopes.join(' '));
      }
      result = { consent: { grantId: await grant.save() } };
    } else {
      result = { error: 'access_denied', error_description: 'the user denied the request' };
    }
    const returnTo = await provider.interactionResult(ctx.req, ctx.res, result, {
      mergeWithLastSubmission: action !== 'login',
    });
    ctx.status = 303;
    ctx.redirect(returnTo);
  });

  server.on('request', provider.callback());
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
  console.error(`listening on ${issuer}`); // the readiness line tests/support/processes.py waits for
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
