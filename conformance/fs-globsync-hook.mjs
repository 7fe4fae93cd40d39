// Node 20 has no fs.globSync (Node 22 does); @modelcontextprotocol/conformance imports it by
// name from "fs". This hook (node --import ./fs-globsync-hook.mjs) serves a virtual "fs" that
// re-exports the real one plus a small globSync ("*", "?", "**/" patterns: enough for the
// suite, which only globs "**/checks.json"). On Node >= 22 it does nothing.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  const hooks = `
    const SHIM = 'dex-shim:fs';
    export async function resolve(specifier, context, next) {
      if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL !== SHIM) {
        return { url: SHIM, shortCircuit: true };
      }
      return next(specifier, context);
    }
    export async function load(url, context, next) {
      if (url !== SHIM) return next(url, context);
      const source = \`
        import fs from 'node:fs';
        import path from 'node:path';
        export * from 'node:fs';
        export default fs;
        const toRegExp = (pattern) => {
          let re = '';
          for (let i = 0; i < pattern.length; i++) {
            const c = pattern[i];
            if (c === '*' && pattern[i + 1] === '*') {
              i++;
              if (pattern[i + 1] === '/') { i++; re += '(?:.*/)?'; } else { re += '.*'; }
            } else if (c === '*') re += '[^/]*';
            else if (c === '?') re += '[^/]';
            else re += c.replace(/[.+^$\\\\{}()|[\\\\]\\\\\\\\]/g, '\\\\\\\\$&');
          }
          return new RegExp('^' + re + '$');
        };
        const walk = (root, rel, out) => {
          let entries;
          try { entries = fs.readdirSync(path.join(root, rel), { withFileTypes: true }); } catch { return; }
          for (const e of entries) {
            const r = rel ? rel + '/' + e.name : e.name;
            out.push(r);
            if (e.isDirectory()) walk(root, r, out);
          }
        };
        export function globSync(patterns, options = {}) {
          const cwd = options.cwd ? String(options.cwd) : process.cwd();
          const res = (Array.isArray(patterns) ? patterns : [patterns]).map(toRegExp);
          const all = [];
          walk(cwd, '', all);
          return all.filter((p) => res.some((re) => re.test(p))).map((p) => p.split('/').join(path.sep));
        }
      \`;
      return { format: 'module', source, shortCircuit: true };
    }
  `;
  register('data:text/javascript,' + encodeURIComponent(hooks));
}
