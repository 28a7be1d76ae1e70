// A cluster worker that speaks the IPC schema and does nothing else, for tests of the supervisor.
// FAKE_WORKER: `serve` (default) is prepared at once, ready when activated and gone on shutdown;
// `crash` exits 1 before it is prepared; `stubborn` serves but never stops on shutdown. Its ready
// message reports FAKE_HTTP_PORT (and that plus 1000 for SMTP). Run only by the supervisor.
import { onPrimaryMessage, sendToPrimary } from '../../src/service/ipc.ts';

const httpPort = Number(process.env.FAKE_HTTP_PORT ?? 1025);

const mode = process.env.FAKE_WORKER ?? 'serve';
if (mode === 'crash') process.exit(1);
onPrimaryMessage((message) => {
  if (message.type === 'activate') sendToPrimary({ type: 'ready', httpPort, smtpPort: httpPort + 1000 });
  else if (message.type === 'shutdown' && mode !== 'stubborn') process.exit(0);
});
sendToPrimary({ type: 'prepared' });
