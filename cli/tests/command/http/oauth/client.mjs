// An MCP client of the official TypeScript SDK, authenticating as OAuth's client_credentials
// client `mcp-client`: it finds the authorization server through the MCP server's 401 and
// Protected Resource Metadata, gets a token for the server, then lists the tools and calls
// `count` twice. Prints one JSON line of what it saw.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const auth = new ClientCredentialsProvider({
  clientId: 'mcp-client',
  clientSecret: process.env.CLIENT_SECRET,
  scope: 'mcp:tools',
  expectedIssuer: process.env.ISSUER,
});
const transport = new StreamableHTTPClientTransport(new URL(process.env.SERVER_URL), {
  authProvider: auth,
});
const client = new Client({ name: 'oauth-test', version: '1.0.0' });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((tool) => tool.name);
const counts = [];
for (let i = 0; i < 2; i++) {
  const result = await client.callTool({ name: 'count', arguments: {} });
  counts.push(result.content[0].text);
}
const token = auth.tokens()?.access_token ?? '';
console.log(JSON.stringify({ tools, counts, token }));
await client.close();
