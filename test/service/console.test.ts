// The web console end to end in a real browser (Debian's chromium through playwright-core)
// against the running service, real mail and a real webhook receiver: sign in, find and open a
// message, replay dead letters (one, then all that match) and see them delivered, create and
// delete a route, use the route tester, edit a route, rotate its secret and add a destination; a
// wrong key says so. Writes the screenshots in docs/ with
// CONSOLE_SCREENSHOTS=1, else in a temporary directory (a test run leaves the checkout as it was).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import type { Page } from 'playwright-core';
import { type Browser, CHROMIUM, chromiumPresent, launchBrowser } from '../_support/browser.ts';
import { ApiClient } from '../_support/http.ts';
import { type Pipeline, routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const KEY = 'console-test-key-0123456789';
const DOMAIN = 'console.example';
const SHOTS_IN_DOCS = process.env.CONSOLE_SCREENSHOTS === '1';
const SHOTS = SHOTS_IN_DOCS
  ? fileURLToPath(new URL('../../docs/', import.meta.url))
  : mkdtempSync(path.join(os.tmpdir(), 'mailroute-console-'));

const present = chromiumPresent();
if (!present)
  console.warn(`SKIPPED: the console browser tests (no Chromium at ${CHROMIUM}; apt-get install chromium)`);
const serial = present ? test.serial : test.serial.skip;

let pipe: Pipeline;
let api: ApiClient;
let browser: Browser;
let page: Page;
let healthy = false;
const ids: Record<string, string> = {};

async function send(to: string, subject: string): Promise<string> {
  const raw = `From: Ana <ana@sender.example>\r\nTo: ${to}\r\nSubject: ${subject}\r\nMessage-ID: <${subject.replace(/\W/g, '')}@sender.example>\r\nX-Mailer: console-test\r\n\r\nHello from the console test.\r\n`;
  return acceptedId(await sendRaw(pipe.service.smtpPort, { from: 'ana@sender.example', to: [to] }, raw));
}

const shot = (name: string) => page.screenshot({ path: path.join(SHOTS, name), fullPage: true });

if (present) {
  test.before(async () => {
    // one retry: the dead letters the console shows need no more, and each park and claim of a
    // retry took a second or more while the suite loads both cores (the hook took 12 s of its
    // 20 s here, and timed out in CI with the fourth attempt still to come)
    pipe = await startPipeline(undefined, {
      label: 'console',
      env: { SERVICE_API_KEY: KEY, RETRY_DELAYS: '200ms' },
    });
    api = new ApiClient(pipe.service.baseUrl, KEY);
    pipe.receiver.on('/ok', { status: 200 });
    // markup in an answer: the console shows it as text, never as HTML
    pipe.receiver.on('/flaky', () =>
      healthy ? { status: 200 } : { status: 503, body: '<b id="injected">down</b>' },
    );
    const via = { api, receiver: pipe.receiver };
    await routeTo(via, DOMAIN, '/ok', 'orders');
    await routeTo(via, DOMAIN, '/flaky', 'hooks+*');
    try {
      ids.invoice = await send(`orders@${DOMAIN}`, 'Invoice 42');
      ids.receipt = await send(`orders@${DOMAIN}`, 'Receipt 7');
      ids.broken = await send(`hooks+a@${DOMAIN}`, 'Build failed');
      ids.broken2 = await send(`hooks+b@${DOMAIN}`, 'Deploy failed');
      // up to a minute each: twice a message waited about 19 s here, routed, for its first
      // attempt's write, both times beside history.test.ts's 70,000-lease test on the shared
      // FerretDB (which write waited was not found)
      for (const id of [ids.invoice!, ids.receipt!]) await waitForState(api, id, ['delivered'], 60_000);
      for (const id of [ids.broken!, ids.broken2!]) await waitForState(api, id, ['dlq'], 60_000);
    } catch (err) {
      pipe.showLog('console before hook');
      throw err;
    }
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('dialog', (dialog) => void dialog.accept());
  });

  test.after.always(async () => {
    await browser?.close();
    await pipe?.stop();
    if (!SHOTS_IN_DOCS) rmSync(SHOTS, { recursive: true, force: true });
  });
}

serial('a wrong key shows a clear error and the console stays closed', async (t) => {
  await page.goto(`${pipe.service.baseUrl}/console`);
  await page.locator('#key').fill('not-the-key');
  await page.locator('#login button[type=submit]').click();
  const error = page.locator('#login-error');
  await error.waitFor({ state: 'visible' });
  t.regex((await error.textContent()) ?? '', /wrong.*401 unauthorized/i);
  t.true(await page.locator('#nav').isHidden());
  await shot('console-login.png');
});

serial('with the key: the messages, newest first, with counters; filter, then open one', async (t) => {
  await page.locator('#key').fill(KEY);
  await page.locator('#login button[type=submit]').click();
  await page.locator('#nav').waitFor({ state: 'visible' });
  const rows = page.locator('#view tbody tr');
  await rows.first().waitFor();
  t.deepEqual(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-id'))), [
    ids.broken2,
    ids.broken,
    ids.receipt,
    ids.invoice,
  ]);
  // the key lives in this tab's sessionStorage only: not in the URL, not in a cookie
  t.is(await page.evaluate(() => sessionStorage.getItem('mailroute.apiKey')), KEY);
  t.false(page.url().includes(KEY));
  t.deepEqual(await browser.context.cookies(), []);
  await page.locator('#counters [data-counter="dead letters"] b').waitFor();
  t.is(await page.locator('#counters [data-counter="dead letters"] b').textContent(), '2');
  t.is(await page.locator('#counters [data-counter="webhook OK"] b').textContent(), '2');
  await shot('console-messages.png');

  await page.locator('select[name=state]').selectOption('delivered');
  await page.locator('input[name=domain]').fill(DOMAIN);
  await page.locator('.filters button[type=submit]').click();
  // four rows before, two once the filter applies
  await page.locator('#view tbody tr').nth(2).waitFor({ state: 'detached' });
  await page.getByRole('link', { name: 'Invoice 42' }).click();
  await page.locator('#headers').waitFor();
  t.is(await page.locator('#message-state').textContent(), 'delivered');
  t.true(await page.locator('td', { hasText: /^200$/ }).isVisible(), 'the attempt answered 200');
  t.true(await page.locator('td', { hasText: /^\d+ ms$/ }).isVisible(), 'and took that long');
  await page.locator('#headers', { hasText: 'X-Mailer' }).waitFor();
  t.regex((await page.locator('#headers').textContent()) ?? '', /Subject: Invoice 42/);
  t.true(await page.locator('#raw-link').isVisible());
  await shot('console-message.png');
});

serial(
  'the dead letter queue shows why; replay one and see it delivered, then replay all that match',
  async (t) => {
    await page.goto(`${pipe.service.baseUrl}/console#/dlq`);
    const row = page.locator(`#view tr[data-id="${ids.broken}"]`);
    await row.waitFor();
    t.regex((await row.locator('.reason').textContent()) ?? '', /503/);
    t.is(await page.locator('#view tbody tr').count(), 2);
    await shot('console-dlq.png');

    healthy = true;
    await row.getByRole('button', { name: 'Replay' }).click();
    await page.locator(`#view tr[data-id="${ids.broken}"]`).waitFor({ state: 'detached' });
    await waitForState(api, ids.broken!, ['delivered']);
    await page.goto(`${pipe.service.baseUrl}/console#/message/${ids.broken}`);
    await page.locator('#message-state').waitFor();
    t.is(await page.locator('#message-state').textContent(), 'delivered');

    await page.goto(`${pipe.service.baseUrl}/console#/dlq?domain=${DOMAIN}`);
    await page.locator(`#view tr[data-id="${ids.broken2}"]`).waitFor();
    await page.locator('#replay-all').click();
    await page.locator('#bulk-status', { hasText: 'Re-queued' }).waitFor();
    t.is(await page.locator('#bulk-status').textContent(), 'Re-queued 1 of 1 matching message(s).');
    await waitForState(api, ids.broken2!, ['delivered']);
  },
);

serial(
  'an attempt shows what the receiver answered, as text; endpoints show their health, paused and resumed by hand',
  async (t) => {
    await page.goto(`${pipe.service.baseUrl}/console#/message/${ids.broken}`);
    await page.locator('#message-state').waitFor();
    const answer = page.locator('pre.response-body', { hasText: 'down' }).first();
    await answer.waitFor();
    t.is(await answer.textContent(), '<b id="injected">down</b>');
    t.is(await page.locator('#injected').count(), 0, 'never rendered as HTML');

    await page.goto(`${pipe.service.baseUrl}/console#/routes`);
    const row = () => page.locator('#endpoints tr', { hasText: pipe.receiver.url('/ok') });
    await row().waitFor();
    t.is(await row().locator('.state').textContent(), 'healthy');
    t.is(
      await page.locator('#view tr', { hasText: 'orders' }).locator('.endpoint-state .state').textContent(),
      'healthy',
    );
    await row().getByRole('button', { name: 'Pause' }).click();
    await row().locator('.state', { hasText: 'paused' }).waitFor();
    const [paused] = (await api.get<Array<{ url: string; state: string }>>('/endpoints')).body.filter(
      (e) => e.url === pipe.receiver.url('/ok'),
    );
    t.is(paused?.state, 'paused');
    await shot('console-endpoints.png');
    await row().getByRole('button', { name: 'Resume' }).click();
    await row().locator('.state', { hasText: 'healthy' }).waitFor();
  },
);

serial('domains and routes: create a route, test an address against it, delete it', async (t) => {
  await page.goto(`${pipe.service.baseUrl}/console#/routes`);
  const form = page.locator('#new-route');
  await form.waitFor();
  await form.locator('input[name=domain]').fill(DOMAIN);
  await form.locator('input[name=recipient_pattern]').fill('sales-*');
  await form.locator('input[name=webhook_url]').fill('https://crm.example/hooks/mail');
  await form.getByRole('button', { name: 'Add route' }).click();
  const created = page.locator('#view tr', { hasText: 'sales-*' });
  await created.waitFor();
  const routeId = await created.getAttribute('data-id');
  t.regex(routeId ?? '', /^r-\d{22}$/);

  await page.locator('#tester input[name=address]').fill(`sales-east@${DOMAIN}`);
  await page.locator('#tester button[type=submit]').click();
  await page.locator('#match-result p').first().waitFor();
  t.regex(
    (await page.locator('#match-result').textContent()) ?? '',
    new RegExp(`Route ${routeId}[\\s\\S]*wildcard pattern "sales-\\*"`),
  );
  await page.locator('#tester input[name=address]').fill('someone@elsewhere.example');
  await page.locator('#tester button[type=submit]').click();
  await page.locator('#match-result', { hasText: '550 5.7.1' }).waitFor();
  await page.locator('#tester input[name=address]').fill(`sales-east@${DOMAIN}`);
  await page.locator('#tester button[type=submit]').click();
  await page.locator('#match-result', { hasText: 'sales-' }).waitFor();
  await shot('console-routes.png');

  await created.locator('button.danger').click();
  await page.locator(`#view tr[data-id="${routeId}"]`).waitFor({ state: 'detached' });
  const routes = await api.get<Array<{ id: string }>>('/routes');
  t.false(routes.body.some((r) => r.id === routeId));
});

serial('a route is edited, its secret rotated and a destination added from the console', async (t) => {
  const created = await api.post<{ id: string }>('/routes', {
    domain: DOMAIN,
    recipient_pattern: 'billing',
    webhook_url: 'https://old.example/hook',
    webhook_secret: 'first secret',
  });
  t.is(created.status, 201);
  const id = created.body.id;
  await page.goto(`${pipe.service.baseUrl}/console#/routes`);
  const edit = page.locator('#edit-route');
  await edit.waitFor();
  await edit.locator('input[name=id]').fill(id);
  await edit.locator('input[name=webhook_url]').fill('https://new.example/hook');
  await edit.locator('input[name=webhook_secret]').fill('second secret');
  await edit.getByRole('button', { name: 'Save route' }).click();
  const row = page.locator(`#view tr[data-id="${id}"]`);
  await page.locator(`#view tr[data-id="${id}"]`, { hasText: 'https://new.example/hook' }).waitFor();
  t.regex((await row.textContent()) ?? '', /old secret until/);

  const add = page.locator('#new-destination');
  await add.locator('input[name=id]').fill(id);
  await add.locator('input[name=webhook_url]').fill('https://archive.example/hook');
  await add.getByRole('button', { name: 'Add destination' }).click();
  await page.locator(`#view tr[data-id="${id}"]`, { hasText: 'https://archive.example/hook' }).waitFor();

  interface Listed {
    id: string;
    webhook_url: string;
    webhook_secret?: string;
    previous_secret_until?: string;
    destinations?: Array<{ webhook_url: string }>;
  }
  const route = (await api.get<Listed[]>('/routes')).body.find((r) => r.id === id);
  t.like(route, { webhook_url: 'https://new.example/hook', webhook_secret: 'second secret' });
  t.deepEqual(
    route?.destinations?.map((d) => d.webhook_url),
    ['https://archive.example/hook'],
  );
  t.truthy(route?.previous_secret_until);
  t.is((await api.delete(`/routes/${id}`)).status, 204);
});
