// Plain multipart messages: a text part and attachments, base64 in 76-character lines (the memory
// bench's large messages, and tests that send attachments).

/** base64 in 76-character lines, each ended by CRLF (a whole last line is ended too). */
export function base64Lines(bytes: Buffer): string {
  return bytes.toString('base64').replace(/.{76}/g, '$&\r\n');
}

export interface Attachment {
  /** its filename (and Content-Type name) */
  name: string;
  contentType: string;
  content: Buffer;
}

/** A multipart/mixed message: `text` as its text/plain part, then each attachment in base64. */
export function multipartWithAttachments(
  headers: { from: string; to: string; subject: string; messageId: string },
  text: string,
  attachments: readonly Attachment[],
): string {
  return [
    `From: ${headers.from}`,
    `To: ${headers.to}`,
    `Subject: ${headers.subject}`,
    `Message-ID: ${headers.messageId}`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="b"',
    '',
    '--b',
    'Content-Type: text/plain; charset=utf-8',
    '',
    text,
    ...attachments.flatMap(({ name, contentType, content }) => [
      '--b',
      `Content-Type: ${contentType}; name="${name}"`,
      `Content-Disposition: attachment; filename="${name}"`,
      'Content-Transfer-Encoding: base64',
      '',
      base64Lines(content),
    ]),
    '--b--',
    '',
  ].join('\r\n');
}
