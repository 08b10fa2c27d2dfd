// A sample A2A client (@a2a-js/sdk) for a GooseAgent in mode kubernetes: it
// sends one message, authenticated with a projected ServiceAccount token for
// the agent's audience, and prints the reply's text.
//
//   node client.mjs http://helper.team.svc:8080 /var/run/agent/token "hello"
//
// The kubelet rewrites the token file before the token expires, so the file
// is read again for every request instead of once.
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Role } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from '@a2a-js/sdk/client';

const [url, tokenFile = '/var/run/agent/token', text = 'hello'] = process.argv.slice(2);
if (!url) {
  console.error('usage: node client.mjs AGENT_URL [TOKEN_FILE] [TEXT]');
  process.exit(2);
}

async function fetchWithToken(input, init = {}) {
  const token = (await readFile(tokenFile, 'utf8')).trim();
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
}

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: fetchWithToken })],
  }),
);
const client = await factory.createFromUrl(url);
const result = await client.sendMessage({
  message: { messageId: randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: text } }] },
});

// A reply is a Message, or a Task whose artifacts hold the agent's text.
const parts = [
  ...(result.parts ?? []),
  ...(result.artifacts ?? []).flatMap((a) => a.parts),
  ...(result.status?.message?.parts ?? []),
];
const reply = parts.filter((p) => p.content?.$case === 'text').map((p) => p.content.value).join('');
const state = result.status?.state;
console.log(reply);
if (state !== undefined && state !== 3 /* TASK_STATE_COMPLETED */) {
  console.error(`the task ended in state ${state}`);
  process.exit(1);
}
