// Test domains for sender authentication: an RSA key made per run, the DNS zone that publishes it
// with SPF and DMARC records, and DKIM signing with mailauth's signer (the test signs; the service
// verifies).
import { generateKeyPairSync } from 'node:crypto';
import { dkimSign } from 'mailauth/lib/dkim/sign.js';
import type { Zone } from './dns.ts';

export const SELECTOR = 'test1';

export interface TestSigner {
  zone: Zone;
  /** the message with a DKIM-Signature of `domain` prepended */
  sign(message: string, domain: string): Promise<string>;
}

/**
 * pass.test: SPF allows 127.0.0.1, DKIM key, DMARC p=reject. fail.test: SPF -all, DMARC p=reject.
 * soft.test: SPF ~all. none.test: not in DNS at all.
 */
export function testDomains(): TestSigner {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 1024 });
  const key = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
  const zone: Zone = {
    'pass.test': { TXT: ['v=spf1 ip4:127.0.0.1 -all'], A: ['127.0.0.1'] },
    [`${SELECTOR}._domainkey.pass.test`]: { TXT: [`v=DKIM1; k=rsa; p=${key}`] },
    '_dmarc.pass.test': { TXT: ['v=DMARC1; p=reject'] },
    'fail.test': { TXT: ['v=spf1 -all'], A: ['127.0.0.1'] },
    '_dmarc.fail.test': { TXT: ['v=DMARC1; p=reject'] },
    'soft.test': { TXT: ['v=spf1 ~all'], A: ['127.0.0.1'] },
  };
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  return {
    zone,
    async sign(message, domain) {
      const signature = { signingDomain: domain, selector: SELECTOR, privateKey: pem };
      // the signer reads signatureData (the typings ask for the fields at the top level too)
      const signed = await dkimSign(message, {
        canonicalization: 'relaxed/relaxed',
        ...signature,
        signatureData: [signature],
      });
      if (signed.errors.length > 0) throw new Error(`signing failed: ${JSON.stringify(signed.errors)}`);
      if (!signed.signatures) throw new Error('signing produced no signature');
      return signed.signatures + message;
    },
  };
}

export function plainMessage(from: string, body = 'hello\r\n'): string {
  return [
    `From: ${from}`,
    'To: inbox@shop.example',
    'Subject: auth test',
    `Message-ID: <${Math.random().toString(36).slice(2)}@test>`,
    '',
    body,
  ].join('\r\n');
}
