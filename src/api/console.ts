// /console: the operator's web console, static files served from src/console/ (read once at
// start). They need no key to load; every call the page makes carries the key the user typed.
import { readFileSync } from 'node:fs';
import type { FastifyPluginAsync } from 'fastify';

const DIR = new URL('../console/', import.meta.url);
const FILES = Object.freeze({
  'index.html': 'text/html; charset=utf-8',
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
} as const);

export const consoleRoutes: FastifyPluginAsync = async (app) => {
  const content = new Map(
    Object.entries(FILES).map(([name, type]) => [name, { type, body: readFileSync(new URL(name, DIR)) }]),
  );
  const send = (name: string) => {
    const file = content.get(name)!;
    return async (_request: unknown, reply: import('fastify').FastifyReply) =>
      reply
        .type(file.type)
        .header('cache-control', 'no-cache')
        .header('x-content-type-options', 'nosniff')
        .header(
          'content-security-policy',
          "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        )
        .send(file.body);
  };
  app.get('/console', send('index.html'));
  app.get('/console/', send('index.html'));
  for (const name of Object.keys(FILES)) app.get(`/console/${name}`, send(name));
};
