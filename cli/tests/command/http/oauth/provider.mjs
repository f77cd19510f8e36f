// An OpenID Provider for the tests (oidc-provider, OpenID Certified): on 127.0.0.1:$PORT,
// issuing JWT access tokens for the resource $RESOURCE to the confidential client
// `mcp-client` (client_credentials grant), signed with an RS256 key made at start.
// Prints `issuer URL` once it listens.
import Provider, { errors } from 'oidc-provider';
import { exportJWK, generateKeyPair } from 'jose';

const resource = process.env.RESOURCE;
const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const key = { ...(await exportJWK(privateKey)), kid: 'test-rs256', alg: 'RS256', use: 'sig' };

const provider = new Provider(issuer, {
  jwks: { keys: [key] },
  clients: [
    {
      client_id: 'mcp-client',
      client_secret: process.env.CLIENT_SECRET,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_basic',
      scope: 'mcp:tools',
    },
  ],
  scopes: ['mcp:tools'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) throw new errors.InvalidTarget();
        return {
          scope: 'mcp:tools',
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});
provider.listen(port, '127.0.0.1', () => console.log(`issuer ${issuer}`));
